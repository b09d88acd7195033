"""The SDK's PTY methods over the grid's background processes.

``pty_exec_start`` starts the command as a background process of the session
(``AsyncClient.start_process``), waits up to ``yield_time_s`` for it to end,
and answers what it wrote so far; ``pty_write_stdin`` sends to it and answers
what it wrote since. The output is re-read from the process's absolute offset,
so nothing is lost or repeated between calls. Unlike the grid's terminal (one
per session, holding the session while open), background processes run beside
the session's execs, as the SDK expects of its PTY processes. They run on
pipes, not a tty: a program that insists on a terminal belongs in the grid's
terminal (``AsyncClient.pty``, ``sandgrid shell``).
"""

from __future__ import annotations

import contextlib
import shlex
from dataclasses import dataclass
from pathlib import Path

from agents.sandbox.errors import PtySessionNotFoundError
from agents.sandbox.session.pty_types import (
    PTY_PROCESSES_MAX,
    PtyExecUpdate,
    allocate_pty_process_id,
)

from sandgrid.client import AsyncBackgroundProcess, AsyncClient
from sandgrid.errors import LimitExceeded, SandgridError

__all__ = ["DEFAULT_YIELD_S", "BackgroundPty"]

DEFAULT_YIELD_S = 0.25
"""How long a call waits for the process to end when the model gave no ``yield_time_s``."""


@dataclass
class _Pty:
    proc: AsyncBackgroundProcess
    offset: int = 0


class BackgroundPty:
    """Mixin of ``SandgridSandboxSession``: the PTY methods of ``BaseSandboxSession``."""

    _client: AsyncClient
    _pty_table: dict[int, _Pty] | None = None

    @property
    def sandgrid_session_id(self) -> str:  # pragma: no cover - the session's own
        raise NotImplementedError

    @property
    def _ptys(self) -> dict[int, _Pty]:
        if self._pty_table is None:
            self._pty_table = {}
        return self._pty_table

    def supports_pty(self) -> bool:
        return True

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: object = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Start ``command`` in the background; answer its first output (and its end)."""
        _ = (timeout, user, tty, max_output_tokens)
        if len(self._ptys) >= PTY_PROCESSES_MAX:
            raise LimitExceeded(
                f"{PTY_PROCESSES_MAX} PTY processes are open: terminate some first",
                operation="pty_exec_start",
                context={"rule": f"at most {PTY_PROCESSES_MAX}"},
            )
        words = [str(c) for c in command]
        line = words[0] if len(words) == 1 else shlex.join(words)
        sid = self.sandgrid_session_id
        if shell is True:
            proc = await self._client.start_process(sid, shell=line)
        elif shell:
            proc = await self._client.start_process(sid, [*shell, line])
        else:
            proc = await self._client.start_process(sid, words)
        pid = allocate_pty_process_id(set(self._ptys))
        self._ptys[pid] = _Pty(proc)
        return await self._collect(pid, yield_time_s)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Send ``chars`` to the process; answer what it wrote since the last call."""
        _ = max_output_tokens
        entry = self._ptys.get(session_id)
        if entry is None:
            raise PtySessionNotFoundError(session_id=session_id)
        if chars:
            await entry.proc.send_stdin(chars)
        return await self._collect(session_id, yield_time_s)

    async def pty_terminate_all(self) -> None:
        """Kill every process the PTY methods started (those still running)."""
        entries, self._pty_table = list(self._ptys.values()), {}
        for entry in entries:
            with contextlib.suppress(SandgridError):
                await entry.proc.kill("KILL")

    async def _collect(self, pid: int, yield_time_s: float | None) -> PtyExecUpdate:
        entry = self._ptys[pid]
        wait_s = DEFAULT_YIELD_S if yield_time_s is None else max(0.0, yield_time_s)
        info = await entry.proc.wait(timeout=wait_s)
        logs = await entry.proc.logs(since=entry.offset)
        entry.offset = logs.offset
        if info.running and logs.running:
            return PtyExecUpdate(pid, logs.data.encode(), None, None)
        self._ptys.pop(pid, None)
        final = await entry.proc.wait(timeout=0)
        code = final.exit_code if final.exit_code is not None else 128 + (final.signal or 9)
        return PtyExecUpdate(None, logs.data.encode(), code, None)
