"""The synchronous SDK: ``Client``, its ``Session`` and ``BackgroundProcess`` handles.

with Client() as client, client.session(type="python") as s:
    s.write_file("a.py", "print(6 * 7)")
    print(s.exec(["python3", "a.py"]).stdout)

A shell over the pure base (``_base``): the one-call methods come from its tables;
what is written here is how a call is sent, and the methods that do more I/O
than one send (streams, terminals, handles).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal, TypeVar, Unpack, overload

import httpx

from sandgrid.audit import AuditRecord
from sandgrid.client import _process_calls as procs
from sandgrid.client import _requests as api
from sandgrid.client._base import BaseClient, ProcessHandle, SessionHandle
from sandgrid.client._call import Call, transport_errors
from sandgrid.client._ports import port_base
from sandgrid.client._process_calls import ProcessRef
from sandgrid.client._pty import Terminal, TerminalOptions, terminal_url
from sandgrid.client._requests import (
    Argv,
    AuditFilters,
    CommandOptions,
    ExecOptions,
    OutputOptions,
    SessionOptions,
)
from sandgrid.client._shell import Closing, SyncHandle, SyncShell
from sandgrid.client._stream import TurnStream, deliver
from sandgrid.errors import SandgridError
from sandgrid.models import ExecResult, SessionInfo
from sandgrid.processes import ProcessInfo

__all__ = ["BackgroundProcess", "Client", "Session"]

T = TypeVar("T")


class Client(BaseClient[httpx.BaseTransport], SyncShell, Closing):
    """A blocking client of the sandgrid API over one pooled HTTP connection set.

    Args: as ``BaseClient``'s; ``transport`` is an ``httpx.BaseTransport``.
    """

    def _connect(self, transport: httpx.BaseTransport | None) -> None:
        self._http = httpx.Client(transport=transport, **self._http_options())

    def _send(self, call: Call[T]) -> T:
        """Send ``call``, retrying as ``self.retry`` says (the decision is the base's)."""
        retrying = self.retry.retrying(call)
        while True:
            try:
                return self._send_once(call)
            except SandgridError as exc:
                time.sleep(retrying.wait_after(exc))

    def _send_once(self, call: Call[T]) -> T:
        with transport_errors(self.base_url):
            response = self._http.send(call.build(self._http, call.timeout))
        return call.read(response)

    def session(self, type: str = "python", **options: Unpack[SessionOptions]) -> Session:
        """Create a session and return its handle; ``with`` closes it on exit."""
        return Session(self, self.create_session(type, **options))

    def attach(self, session_id: str) -> Session:
        """A handle on an existing session of the caller's tenant."""
        return Session(self, self.get_session(session_id))

    def exec(
        self, session_id: str, argv: Argv = None, **options: Unpack[OutputOptions]
    ) -> ExecResult:
        """Run one command: exactly one of ``argv``, ``shell``, ``python``.

        Retried when safe, under an ``idempotency_key`` (a new one per call when
        omitted): it runs at most once, whatever the retries. With ``on_stdout``
        or ``on_stderr``, the output is streamed to them as it is written.
        """
        call = api.exec_call(session_id, argv, **options)
        out, err = options.get("on_stdout"), options.get("on_stderr")
        if out is None and err is None:
            return self._send(call)
        with TurnStream(self, session_id, api.streamed(call)) as stream:
            for event in stream:
                deliver(event, out, err)
            return stream.wait()

    def exec_stream(
        self, session_id: str, argv: Argv = None, **options: Unpack[ExecOptions]
    ) -> TurnStream:
        """Start one command and answer its events as they happen (a ``TurnStream``:
        iterate it, ``wait()`` for the result, ``cancel()`` it)."""
        return TurnStream(self, session_id, api.exec_stream_call(session_id, argv, **options))

    def events(self, session_id: str, turn_id: str, *, after: str = "0") -> TurnStream:
        """Re-attach to a streamed turn: its events after offset ``after`` (an event id)."""
        return TurnStream(self, session_id, api.events_call(session_id, turn_id, after))

    def start_process(
        self, session_id: str, argv: Argv = None, **command: Unpack[CommandOptions]
    ) -> BackgroundProcess:
        """Start a command in the background; answers at once with its handle."""
        info = self._send(procs.start_call(session_id, argv, **command))
        return BackgroundProcess(self, session_id, info)

    def process(self, session_id: str, pid: int, sandbox: str = "") -> BackgroundProcess:
        """A handle on a process another client started (its session, pid and sandbox)."""
        info = ProcessInfo(pid=pid, argv=[], running=True, started_at=0.0, sandbox=sandbox)
        return BackgroundProcess(self, session_id, info)

    def pty(self, session_id: str, **options: Unpack[TerminalOptions]) -> Terminal:
        """Open an interactive terminal (a login shell) on the session.

        The shell runs as the sandbox user in /workspace; it ends when it exits,
        when the terminal is closed, or after ``idle_s`` without input or output
        or ``max_s`` in all (the grid's defaults when None).
        """
        return Terminal(terminal_url(self.base_url, session_id, options), self._headers())

    def audit_records(self, **filters: Unpack[AuditFilters]) -> Iterator[AuditRecord]:
        """Every record of the tenant's audit trail that matches, page after page
        (newest first unless ``order="asc"``), following each page's ``next_cursor``:
        none skipped or repeated while new ones arrive."""
        cursor: str | None = None
        while True:
            page = self._send(api.audit(**filters, cursor=cursor))
            yield from page.records
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def close(self) -> None:
        """Close the HTTP connections (sessions stay open on the grid)."""
        self._http.close()


class Session(SessionHandle[Client], SyncHandle[str], Closing):
    """A handle on one session; as a context manager it closes the session on exit."""

    @overload
    def exec(
        self,
        argv: Argv = None,
        *,
        background: Literal[False] = False,
        **options: Unpack[OutputOptions],
    ) -> ExecResult: ...

    @overload
    def exec(
        self, argv: Argv = None, *, background: Literal[True], **options: Unpack[ExecOptions]
    ) -> BackgroundProcess: ...

    def exec(
        self, argv: Argv = None, *, background: bool = False, **options: Unpack[OutputOptions]
    ) -> ExecResult | BackgroundProcess:
        """Run one command; with ``background=True``, start it and answer at once with a
        ``BackgroundProcess`` (``stdin`` is then sent to it; no ``timeout_s`` or key)."""
        if not background:
            return self.client.exec(self.id, argv, **options)
        proc = self.client.start_process(self.id, argv, **procs.background_command(options))
        if (stdin := options.get("stdin")) is not None:
            proc.send_stdin(stdin)
        return proc

    def exec_stream(self, argv: Argv = None, **options: Unpack[ExecOptions]) -> TurnStream:
        return self.client.exec_stream(self.id, argv, **options)

    def events(self, turn_id: str, *, after: str = "0") -> TurnStream:
        return self.client.events(self.id, turn_id, after=after)

    def pty(self, **options: Unpack[TerminalOptions]) -> Terminal:
        """Open an interactive terminal on this session (see ``Client.pty``)."""
        return self.client.pty(self.id, **options)

    def http(self, port: int, *, timeout: float | None = None) -> httpx.Client:
        """An httpx client bound to ``port`` of this session's sandbox (the port route,
        with the token): ``s.http(8000).get("/api")``. Close it (or use ``with``)."""
        return httpx.Client(
            base_url=port_base(self.client.base_url, self.id, port),
            headers=self.client._headers(),
            timeout=self.client.timeout if timeout is None else timeout,
        )

    def fork(self, count: int = 1, memory: bool = False) -> list[Session]:
        """``count`` new sessions from this one (``Client.fork``); this one keeps running."""
        return [Session(self.client, s) for s in self.client.fork(self.id, count, memory).sessions]

    def refresh(self) -> SessionInfo:
        self.info = self.client.get_session(self.id)
        return self.info

    def close(self) -> SessionInfo:
        """Close the session on the grid; its container is destroyed."""
        self.info = self.client.close_session(self.id)
        return self.info


class BackgroundProcess(ProcessHandle[Client], SyncHandle[ProcessRef]):
    """A background process of a session (from ``Session.exec(..., background=True)``)."""

    def wait(self, timeout: float | None = None) -> ProcessInfo:
        """Wait until the process ends or ``timeout`` seconds pass (None: no limit);
        ``running`` in the answer says which. Raises ``process_lost`` if it is gone."""
        waiting = procs.Waiting(self._ref, timeout)
        while True:
            try:
                self.info = self._send(waiting.call())
            except SandgridError as exc:
                time.sleep(waiting.pause(exc))
            if waiting.done(self.info):
                return self.info

    def kill(self, signal: str = "TERM") -> ProcessInfo:
        """Send ``signal`` (TERM, KILL, INT, HUP, QUIT, USR1, USR2) to its process group."""
        self.info = self._send(procs.kill_call(self._ref, signal))
        return self.info
