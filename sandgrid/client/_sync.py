"""The synchronous SDK: ``Client`` and its ``Session`` handle.

with Client() as client, client.session(type="python") as s:
    s.write_file("a.py", "print(6 * 7)")
    print(s.exec(["python3", "a.py"]).stdout)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar, overload

import httpx

from sandgrid.audit import AuditPage
from sandgrid.batch.models import BatchInfo, BatchIsolation, BatchJob, BatchResult
from sandgrid.client import _process_calls as calls
from sandgrid.client._base import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    BaseClient,
    Call,
    FileContent,
    RetryPolicy,
    transport_error,
)
from sandgrid.client._lifecycle import LifecycleMethods, SessionLifecycle
from sandgrid.client._process_handles import BackgroundProcess
from sandgrid.client._pty import Terminal
from sandgrid.client._stream import ChunkHandler, TurnStream, deliver
from sandgrid.errors import SandgridError
from sandgrid.models import (
    CodeResult,
    ExecResult,
    FileEntry,
    Quotas,
    SandboxTypeInfo,
    SessionInfo,
    SnapshotPolicy,
)
from sandgrid.processes import ProcessInfo
from sandgrid.streaming import TurnCancel
from sandgrid.terminal import PTY_DEFAULT_COLS, PTY_DEFAULT_ROWS

__all__ = ["Client", "Session"]

T = TypeVar("T")


class Client(LifecycleMethods, BaseClient):
    """A blocking client of the sandgrid API over one pooled HTTP connection set.

    Args:
        base_url: the API; ``SANDGRID_API_URL`` when omitted.
        token: the tenant's bearer token; ``SANDGRID_TOKEN`` when omitted.
        timeout: seconds for calls other than exec.
        retries: retries of a call when safe, or a ``RetryPolicy`` (0: none).
        transport: an httpx transport (tests mount the app in-process).
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: RetryPolicy | int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, token, timeout=timeout, retries=retries)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers(), timeout=timeout, transport=transport
        )

    def _send(self, call: Call[T]) -> T:
        """Send ``call``, retrying as ``self.retry`` says (the decision is the base's)."""
        tries, waited = 1, 0.0
        while True:
            try:
                return self._send_once(call)
            except SandgridError as exc:
                delay = self.retry.delay(call, exc, tries, waited)
                if delay is None:
                    raise
            time.sleep(delay)
            tries, waited = tries + 1, waited + delay

    def _send_once(self, call: Call[T]) -> T:
        try:
            response = self._http.request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                content=call.content,
                headers=call.headers,
                timeout=call.timeout if call.timeout is not None else self.timeout,
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.base_url) from exc
        return call.read(response)

    def create_session(
        self,
        type: str = "python",
        *,
        quotas: Quotas | Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, FileContent] | None = None,
        snapshot_policy: SnapshotPolicy = "after_turn",
        labels: Mapping[str, str] | None = None,
        fork_from: str | None = None,
    ) -> SessionInfo:
        """Create a session; ``files`` are written before it is returned."""
        return self._send(
            self._create_session_call(type, quotas, env, files, snapshot_policy, labels, fork_from)
        )

    def session(
        self,
        type: str = "python",
        *,
        quotas: Quotas | Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, FileContent] | None = None,
        snapshot_policy: SnapshotPolicy = "after_turn",
        labels: Mapping[str, str] | None = None,
        fork_from: str | None = None,
    ) -> Session:
        """Create a session and return its handle; ``with`` closes it on exit."""
        info = self.create_session(
            type,
            quotas=quotas,
            env=env,
            files=files,
            snapshot_policy=snapshot_policy,
            labels=labels,
            fork_from=fork_from,
        )
        return Session(self, info)

    def attach(self, session_id: str) -> Session:
        """A handle on an existing session of the caller's tenant."""
        return Session(self, self.get_session(session_id))

    def get_session(self, session_id: str) -> SessionInfo:
        return self._send(self._get_session_call(session_id))

    def list_sessions(self) -> list[SessionInfo]:
        return self._send(self._list_sessions_call())

    def types(self) -> list[SandboxTypeInfo]:
        """The catalog's sandbox types, each with the live nodes that serve it."""
        return self._send(self._types_call())

    def close_session(self, session_id: str) -> SessionInfo:
        return self._send(self._close_session_call(session_id))

    def audit(
        self, *, session: str | None = None, since: float | None = None, limit: int | None = None
    ) -> AuditPage:
        """The tenant's audit trail from ``since`` (epoch s), oldest first (docs/operations.md)."""
        return self._send(self._audit_call(session, since, limit))

    def exec(
        self,
        session_id: str,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        on_stdout: ChunkHandler | None = None,
        on_stderr: ChunkHandler | None = None,
    ) -> ExecResult:
        """Run one command: exactly one of ``argv``, ``shell``, ``python``.

        Retried when safe, under an ``idempotency_key`` (a new one per call when
        omitted): it runs at most once, whatever the retries. With ``on_stdout``
        or ``on_stderr``, the output is streamed to them as it is written.
        """
        if on_stdout is not None or on_stderr is not None:
            stream = self.exec_stream(
                session_id,
                argv,
                shell=shell,
                python=python,
                env=env,
                cwd=cwd,
                stdin=stdin,
                timeout_s=timeout_s,
                idempotency_key=idempotency_key,
            )
            with stream:
                for event in stream:
                    deliver(event, on_stdout, on_stderr)
                return stream.wait()
        call = self._exec_call(
            session_id, argv, shell, python, env, cwd, stdin, timeout_s, idempotency_key
        )
        return self._send(call)

    def run_code(
        self,
        session_id: str,
        code: str,
        *,
        language: str = "python",
        timeout_s: float | None = None,
    ) -> CodeResult:
        """Run code in the session's Jupyter kernel; variables and imports stay between calls.

        An error in the code is in ``result.error``; ``kernel_restarted`` says that the
        state of earlier calls is gone. Not retried once sent: code has effects.
        """
        return self._send(self._run_code_call(session_id, code, language, timeout_s))

    def exec_stream(
        self,
        session_id: str,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> TurnStream:
        """Start one command and answer its events as they happen (a ``TurnStream``:
        iterate it, ``wait()`` for the result, ``cancel()`` it)."""
        call = self._exec_call(
            session_id, argv, shell, python, env, cwd, stdin, timeout_s, idempotency_key
        )
        return TurnStream(self, session_id, self._exec_stream_call(call))

    def events(self, session_id: str, turn_id: str, *, after: str = "0") -> TurnStream:
        """Re-attach to a streamed turn: its events after offset ``after`` (an event id)."""
        return TurnStream(self, session_id, self._events_call(session_id, turn_id, after))

    def cancel(self, session_id: str, turn_id: str) -> TurnCancel:
        """Cancel a turn by id: its processes are killed and its result says ``cancelled``;
        a finished turn is left alone (``state: finished``)."""
        return self._send(self._cancel_call(session_id, turn_id))

    def start_process(
        self,
        session_id: str,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
    ) -> BackgroundProcess:
        """Start a command in the background; answers at once with its handle."""
        call = calls.start_call(session_id, argv, shell, python, env, cwd)
        return BackgroundProcess(self, session_id, self._send(call))

    def processes(self, session_id: str) -> list[ProcessInfo]:
        """The session's background processes, running or finished."""
        return self._send(calls.list_call(session_id))

    def process(self, session_id: str, pid: int, sandbox: str = "") -> BackgroundProcess:
        """A handle on a process another client started (its session, pid and sandbox)."""
        info = ProcessInfo(pid=pid, argv=[], running=True, started_at=0.0, sandbox=sandbox)
        return BackgroundProcess(self, session_id, info)

    def write_files(
        self, session_id: str, files: Mapping[str, FileContent], *, mode: int = 0o644
    ) -> dict[str, Any]:
        return self._send(self._write_files_call(session_id, files, mode))

    def read_file(self, session_id: str, path: str, *, binary: bool = False) -> FileContent:
        return self._send(self._read_file_call(session_id, path, binary))

    def list_files(
        self, session_id: str, path: str = ".", *, recursive: bool = False
    ) -> list[FileEntry]:
        return self._send(self._list_files_call(session_id, path, recursive))

    def delete_file(self, session_id: str, path: str, *, recursive: bool = False) -> dict[str, Any]:
        return self._send(self._delete_file_call(session_id, path, recursive))

    def upload_tar(self, session_id: str, data: bytes, path: str = ".") -> dict[str, Any]:
        return self._send(self._upload_tar_call(session_id, data, path))

    def download_tar(self, session_id: str, path: str = ".") -> bytes:
        return self._send(self._download_tar_call(session_id, path))

    def create_batch(
        self,
        jobs: Sequence[BatchJob | Mapping[str, Any]],
        *,
        type: str = "python",
        concurrency: int = 8,
        isolation: BatchIsolation = "job",
        max_attempts: int = 4,
        quotas: Quotas | Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> BatchInfo:
        """Submit a batch (it starts at once); read its progress with ``get_batch``."""
        call = self._create_batch_call(
            jobs, type, concurrency, isolation, max_attempts, quotas, labels
        )
        return self._send(call)

    def get_batch(self, batch_id: str) -> BatchInfo:
        return self._send(self._get_batch_call(batch_id))

    def batch_results(
        self, batch_id: str, offset: int = 0, limit: int = 10_000
    ) -> tuple[list[BatchResult], int]:
        """Result lines from ``offset`` in completion order, and the offset to read on from."""
        return self._send(self._batch_results_call(batch_id, offset, limit))

    def cancel_batch(self, batch_id: str) -> BatchInfo:
        return self._send(self._cancel_batch_call(batch_id))

    def resume_batch(self, batch_id: str) -> BatchInfo:
        return self._send(self._resume_batch_call(batch_id))

    def pty(
        self,
        session_id: str,
        *,
        rows: int = PTY_DEFAULT_ROWS,
        cols: int = PTY_DEFAULT_COLS,
        term: str = "xterm-256color",
        idle_s: float | None = None,
        max_s: float | None = None,
    ) -> Terminal:
        """Open an interactive terminal (a login shell) on the session.

        The shell runs as the sandbox user in /workspace; it ends when it exits,
        when the terminal is closed, or after ``idle_s`` without input or output
        or ``max_s`` in all (the grid's defaults when None).
        """
        url, headers = self._pty_target(session_id, rows, cols, term, idle_s, max_s)
        return Terminal(url, headers)

    def health(self) -> dict[str, Any]:
        return self._send(self._health_call())

    def close(self) -> None:
        """Close the HTTP connections (sessions stay open on the grid)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Session(SessionLifecycle):
    """A handle on one session; as a context manager it closes the session on exit."""

    def __init__(self, client: Client, info: SessionInfo) -> None:
        self.client = client
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @overload
    def exec(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        on_stdout: ChunkHandler | None = None,
        on_stderr: ChunkHandler | None = None,
        background: Literal[False] = False,
    ) -> ExecResult: ...

    @overload
    def exec(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        background: Literal[True],
    ) -> BackgroundProcess: ...

    def exec(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        on_stdout: ChunkHandler | None = None,
        on_stderr: ChunkHandler | None = None,
        background: bool = False,
    ) -> ExecResult | BackgroundProcess:
        """Run one command; with ``background=True``, start it and answer at once with a
        ``BackgroundProcess`` (``stdin`` is then sent to it; no ``timeout_s`` or key)."""
        if background:
            calls.check_background(timeout_s, idempotency_key)
            proc = self.client.start_process(
                self.id, argv, shell=shell, python=python, env=env, cwd=cwd
            )
            if stdin is not None:
                proc.send_stdin(stdin)
            return proc
        return self.client.exec(
            self.id,
            argv,
            shell=shell,
            python=python,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_s=timeout_s,
            idempotency_key=idempotency_key,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
        )

    def run_code(
        self, code: str, *, language: str = "python", timeout_s: float | None = None
    ) -> CodeResult:
        return self.client.run_code(self.id, code, language=language, timeout_s=timeout_s)

    def exec_stream(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: str | None = None,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> TurnStream:
        return self.client.exec_stream(
            self.id,
            argv,
            shell=shell,
            python=python,
            env=env,
            cwd=cwd,
            stdin=stdin,
            timeout_s=timeout_s,
            idempotency_key=idempotency_key,
        )

    def events(self, turn_id: str, *, after: str = "0") -> TurnStream:
        return self.client.events(self.id, turn_id, after=after)

    def cancel(self, turn_id: str) -> TurnCancel:
        return self.client.cancel(self.id, turn_id)

    def processes(self) -> list[ProcessInfo]:
        """This session's background processes, running or finished."""
        return self.client.processes(self.id)

    def write_file(self, path: str, content: FileContent, *, mode: int = 0o644) -> dict[str, Any]:
        return self.client.write_files(self.id, {path: content}, mode=mode)

    def write_files(self, files: Mapping[str, FileContent], *, mode: int = 0o644) -> dict[str, Any]:
        return self.client.write_files(self.id, files, mode=mode)

    def read_file(self, path: str, *, binary: bool = False) -> FileContent:
        return self.client.read_file(self.id, path, binary=binary)

    def list_files(self, path: str = ".", *, recursive: bool = False) -> list[FileEntry]:
        return self.client.list_files(self.id, path, recursive=recursive)

    def delete(self, path: str, *, recursive: bool = False) -> dict[str, Any]:
        """Delete a file (or a directory with ``recursive=True``) in the workspace."""
        return self.client.delete_file(self.id, path, recursive=recursive)

    def upload_tar(self, data: bytes, path: str = ".") -> dict[str, Any]:
        return self.client.upload_tar(self.id, data, path)

    def download_tar(self, path: str = ".") -> bytes:
        return self.client.download_tar(self.id, path)

    def pty(
        self,
        *,
        rows: int = PTY_DEFAULT_ROWS,
        cols: int = PTY_DEFAULT_COLS,
        term: str = "xterm-256color",
        idle_s: float | None = None,
        max_s: float | None = None,
    ) -> Terminal:
        """Open an interactive terminal on this session (see ``Client.pty``)."""
        return self.client.pty(self.id, rows=rows, cols=cols, term=term, idle_s=idle_s, max_s=max_s)

    def refresh(self) -> SessionInfo:
        self.info = self.client.get_session(self.id)
        return self.info

    def close(self) -> SessionInfo:
        """Close the session on the grid; its container is destroyed."""
        self.info = self.client.close_session(self.id)
        return self.info

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
