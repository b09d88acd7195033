"""``GridCalls``: the AgentScope backend's three primitives as grid calls on one session.

Framework-neutral (no ``agentscope`` import), so that the mapping of the grid's
answers onto what AgentScope's own backends answer is tested without the
framework. Each call is one grid exec or one file op through the public SDK's
``AsyncClient``; nothing is cached, so the same object serves any number of
concurrent calls (the grid runs them side by side: ``quotas.max_parallel_turns``).

What maps to what (AgentScope's ``LocalBackend`` and ``DockerBackend`` are the
reference):

- A command's non-zero exit is a result. A timeout is exit ``-1`` with stderr
  ``b"timed out"`` (what the grid caught of stdout is kept); ``timeout=None``
  means the ``max_timeout_s`` given here (the tenant's ceiling: the grid has no
  "no deadline"), and a longer timeout is held to it; when the grid refuses a
  deadline over the tenant's ceiling, the ceiling it names becomes
  ``max_timeout_s`` and the command runs with it. A grid error (the session
  lost, a tenant limit, the API unreachable) is exit ``-1`` with its code and
  message on stderr, as AgentScope's E2B backend answers a transport error.
- Output over the session's cap (``quotas.output_bytes``, counted in base64 by
  ``wrapper.RUN``) is never cut silently: a line saying so ends stderr.
- Reads and writes under ``/workspace`` are the grid's file API (16 MiB a file);
  elsewhere (``/tmp``, a home directory) they are commands: a read within the
  output cap, a write within the stdin cap (3/4 of 1 MiB).
- A missing file is ``FileNotFoundError``, a directory ``IsADirectoryError``, a
  file over a size cap ``OSError(EFBIG)``; any other refusal ``OSError``.
"""

from __future__ import annotations

import base64
import errno
import posixpath
from dataclasses import dataclass

from sandgrid.client import AsyncClient
from sandgrid.errors import ErrorCode, InvalidInput, SandgridError
from sandgrid.integrations.agentscope import wrapper
from sandgrid.models import MAX_SOURCE_BYTES, WORKSPACE
from sandgrid.models import ExecResult as GridResult

__all__ = [
    "DEFAULT_MAX_TIMEOUT_S",
    "STDIN_WRITE_BYTES",
    "TIMED_OUT",
    "GridCalls",
    "Outcome",
    "grid_failure",
    "outcome_of",
]

DEFAULT_MAX_TIMEOUT_S = 3600.0
"""The longest deadline an exec may have (the grid's default tenant ceiling)."""

STDIN_WRITE_BYTES = MAX_SOURCE_BYTES // 4 * 3
"""The largest file written outside ``/workspace`` (it goes as base64 stdin)."""

TIMED_OUT = b"timed out"
"""The stderr of a command that ran out of time (AgentScope's Local and Docker backends')."""

Outcome = tuple[int, bytes, bytes]
"""(exit code, stdout, stderr), as AgentScope's ``ExecResult`` holds them."""


def _cut_notice(out_cut: bool, err_cut: bool) -> bytes:
    streams = [name for name, cut in (("stdout", out_cut), ("stderr", err_cut)) if cut]
    if not streams:
        return b""
    return (
        f"\n[sandgrid: {' and '.join(streams)} cut at the session's output cap "
        "(quotas.output_bytes)]\n"
    ).encode()


def outcome_of(result: GridResult) -> Outcome:
    """The AgentScope outcome of a ``wrapper.RUN`` command's grid result."""
    out, out_cut = wrapper.decode(result.stdout, result.stdout_truncated)
    err, err_cut = wrapper.decode(result.stderr, result.stderr_truncated)
    if result.timed_out:
        return -1, out, TIMED_OUT
    if result.exit_code is None:
        why = "cancelled" if result.cancelled else "ended without an exit status"
        return -1, out, err + f"\n[sandgrid: the command {why}]\n".encode()
    return result.exit_code, out, err + _cut_notice(out_cut, err_cut)


def grid_failure(exc: SandgridError) -> Outcome:
    """A grid error as AgentScope's internal-failure result (exit ``-1``)."""
    return -1, b"", f"sandgrid {exc.code}: {exc.message}".encode()


def _oserror(code: int, path: str, why: str = "") -> OSError:
    """The builtin exception of ``errno`` ``code`` (``FileNotFoundError`` for ENOENT...)."""
    kind = {errno.ENOENT: FileNotFoundError, errno.EISDIR: IsADirectoryError}.get(code, OSError)
    return kind(code, why or posixpath.basename(path) or path, path)


@dataclass
class GridCalls:
    """One grid session seen as an AgentScope backend's primitives.

    Args:
        client: the SDK client (its owner closes it).
        session_id: the grid session the calls run in.
        workdir: where a command runs and a relative path is, by default.
        max_timeout_s: the deadline of ``timeout=None`` and the longest one.
    """

    client: AsyncClient
    session_id: str
    workdir: str = WORKSPACE
    max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S

    def absolute(self, path: str) -> str:
        """``path`` made absolute against ``workdir`` and normalised."""
        return posixpath.normpath(posixpath.join(self.workdir, path))

    async def run(self, argv: list[str], cwd: str | None, timeout: float | None) -> Outcome:
        """Run ``argv`` in ``cwd`` (``workdir`` when None) within ``timeout`` seconds."""
        if timeout is not None and timeout <= 0:
            return -1, b"", TIMED_OUT
        deadline = min(timeout or self.max_timeout_s, self.max_timeout_s)
        argv = wrapper.run_argv(wrapper.RUN, self.absolute(cwd or self.workdir), *argv)
        try:
            try:
                result = await self.client.exec(self.session_id, argv, timeout_s=deadline)
            except InvalidInput as exc:
                if (ceiling := _ceiling(exc)) is None or ceiling >= deadline:
                    raise
                self.max_timeout_s = ceiling  # the tenant's: learnt once, then kept
                result = await self.client.exec(self.session_id, argv, timeout_s=ceiling)
        except SandgridError as exc:
            return grid_failure(exc)
        return outcome_of(result)

    async def read(self, path: str) -> bytes:
        """The bytes of the file at ``path``.

        Raises:
            FileNotFoundError: nothing is there.
            IsADirectoryError: a directory is there.
            OSError: the file is over a size cap (``EFBIG``), or unreadable.
        """
        path = self.absolute(path)
        if not _in_workspace(path):
            return await self._read_by_exec(path)
        try:
            data = await self.client.read_file(self.session_id, path, binary=True)
        except SandgridError as exc:
            if exc.code == ErrorCode.PATH_OUTSIDE_WORKSPACE:  # a link out of /workspace
                return await self._read_by_exec(path)
            raise await self._refusal(path, exc) from exc
        return data if isinstance(data, bytes) else data.encode()

    async def write(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path``, making its parent directories.

        Raises:
            IsADirectoryError: a directory is there.
            OSError: ``data`` is over a size cap (``EFBIG``), or the write was refused.
        """
        path = self.absolute(path)
        if not _in_workspace(path):
            return await self._write_by_exec(path, data)
        try:
            await self.client.write_files(self.session_id, {path: data})
        except SandgridError as exc:
            if exc.code == ErrorCode.PATH_OUTSIDE_WORKSPACE:
                return await self._write_by_exec(path, data)
            raise await self._refusal(path, exc) from exc
        return None

    async def _refusal(self, path: str, exc: SandgridError) -> OSError:
        """Why the grid refused a file op on ``path``, as AgentScope's backends say it."""
        if exc.code == ErrorCode.PAYLOAD_TOO_LARGE:
            return _oserror(errno.EFBIG, path, exc.message)
        code, _, _ = await self.run(wrapper.run_argv(wrapper.PROBE, path), "/", None)
        if code in (errno.ENOENT, errno.EISDIR):
            return _oserror(code, path)
        return _oserror(errno.EIO, path, f"sandgrid {exc.code}: {exc.message}")

    async def _read_by_exec(self, path: str) -> bytes:
        """A file outside ``/workspace``, through ``cat`` (within the output cap)."""
        try:
            argv = wrapper.run_argv(wrapper.RUN, "/", *wrapper.run_argv(wrapper.READ, path))
            result = await self.client.exec(self.session_id, argv)
        except SandgridError as exc:
            raise _oserror(errno.EIO, path, f"sandgrid {exc.code}: {exc.message}") from exc
        code, out, err = outcome_of(result)
        if code in (errno.ENOENT, errno.EISDIR):
            raise _oserror(code, path)
        if code != 0:
            raise _oserror(errno.EIO, path, err.decode(errors="replace").strip())
        if result.stdout_truncated:
            raise _oserror(errno.EFBIG, path, "over the session's output cap (quotas.output_bytes)")
        return out

    async def _write_by_exec(self, path: str, data: bytes) -> None:
        """A file outside ``/workspace``, through base64 stdin (``STDIN_WRITE_BYTES`` at most)."""
        if len(data) > STDIN_WRITE_BYTES:
            why = f"{len(data)} bytes outside {WORKSPACE}; at most {STDIN_WRITE_BYTES} there"
            raise _oserror(errno.EFBIG, path, why)
        argv = wrapper.run_argv(wrapper.WRITE, path)
        stdin = base64.b64encode(data).decode()
        try:
            result = await self.client.exec(self.session_id, argv, stdin=stdin)
        except SandgridError as exc:
            raise _oserror(errno.EIO, path, f"sandgrid {exc.code}: {exc.message}") from exc
        if result.exit_code == errno.EISDIR:
            raise _oserror(errno.EISDIR, path)
        if result.exit_code != 0:
            raise _oserror(errno.EIO, path, result.stderr.strip() or "write failed")


def _ceiling(exc: InvalidInput) -> float | None:
    """The tenant's longest deadline, when ``exc`` is the grid refusing a longer one."""
    ceiling = exc.context.get("ceiling")
    if exc.context.get("field") != "timeout_s" or not isinstance(ceiling, int | float):
        return None
    return float(ceiling)


def _in_workspace(path: str) -> bool:
    return path == WORKSPACE or path.startswith(WORKSPACE + "/")
