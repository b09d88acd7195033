"""The SDK's PTY methods over the grid's background processes and its terminal.

``pty_exec_start`` starts the command (``pty_entries``: a background process of
the session, or with ``tty=True`` the grid's terminal), waits up to
``yield_time_s`` for it to end and answers what it wrote so far;
``pty_write_stdin`` sends to it and answers what it wrote since. The SDK's own
rules hold as its Docker and UnixLocal clients apply them: the yield times are
clamped as the SDK clamps them, the output is cut to ``max_output_tokens``
with the SDK's truncation (``original_token_count`` says how much there was),
and at most ``PTY_PROCESSES_MAX`` (64) processes are kept: the 65th drops one
as the SDK chooses (an exited one first, never the 8 most recently used). The
grid's own limit on running background processes (``quotas.background_processes``,
which the client sets to 64 unless told otherwise) is met the same way: the
least recently used process is dropped and the start tried once more.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from agents.sandbox.errors import PtySessionNotFoundError
from agents.sandbox.session.pty_types import (
    PTY_PROCESSES_MAX,
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    process_id_to_prune_from_meta,
    resolve_pty_write_yield_time_ms,
    truncate_text_by_tokens,
)

from sandgrid.client import AsyncClient
from sandgrid.errors import Conflict, ErrorCode, LimitExceeded, SandgridError
from sandgrid.integrations.openai_agents.exec_output import transport_error
from sandgrid.integrations.openai_agents.pty_entries import PipeProcess, PtyPoll, TerminalProcess

__all__ = ["DEFAULT_EXEC_YIELD_S", "DEFAULT_WRITE_YIELD_S", "SETTLE_S", "BackgroundPty"]

T = TypeVar("T")

DEFAULT_EXEC_YIELD_S = 10.0
"""How long a start waits for the end when the model gave no ``yield_time_s`` (the SDK's)."""
DEFAULT_WRITE_YIELD_S = 0.25
"""How long a write waits for output when the model gave no ``yield_time_s`` (the SDK's)."""

SETTLE_S = 15.0
"""How long after a terminal's end a call refused as busy is tried again."""

_Entry = PipeProcess | TerminalProcess


class BackgroundPty:
    """Mixin of ``SandgridSandboxSession``: the PTY methods of ``BaseSandboxSession``."""

    _client: AsyncClient
    _pty_table: dict[int, _Entry] | None = None
    _settle_until: float = 0.0

    async def _grid(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``; refused as busy just after a terminal ended, tried again (bounded).

        A terminal turn answers its end before it has let go of the session (it
        saves the workspace first), so the next call may meet 409
        ``session_busy`` for a moment. A refused call never ran: trying it again
        is safe, and only within ``SETTLE_S`` of a terminal's end.
        """
        while True:
            try:
                return await call()
            except Conflict as exc:
                if exc.code != ErrorCode.SESSION_BUSY or time.monotonic() > self._settle_until:
                    raise
                await asyncio.sleep(0.2)

    async def _end(self, entry: _Entry) -> None:
        await entry.kill()
        if isinstance(entry, TerminalProcess):
            self._settle_until = time.monotonic() + SETTLE_S

    @property
    def sandgrid_session_id(self) -> str:  # pragma: no cover - the session's own
        raise NotImplementedError

    @property
    def _ptys(self) -> dict[int, _Entry]:
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
        """Start ``command``; answer its first output (and its end)."""
        _ = (timeout, user)
        words = [str(c) for c in command]
        line = words[0] if len(words) == 1 else shlex.join(words)
        argv = None if shell is True else [*shell, line] if shell else words
        if len(self._ptys) >= PTY_PROCESSES_MAX:
            await self._drop(_prune_choice(self._ptys))
        entry = await self._start(line, argv, tty)
        pid = allocate_pty_process_id(set(self._ptys))
        self._ptys[pid] = entry
        wait_ms = int((DEFAULT_EXEC_YIELD_S if yield_time_s is None else yield_time_s) * 1000)
        return await self._collect(pid, clamp_pty_yield_time_ms(wait_ms), max_output_tokens)

    async def _start(self, line: str, argv: list[str] | None, tty: bool) -> _Entry:
        """The process (``argv``, or the shell ``line`` when None), started; one process
        dropped first when the grid's limit is reached."""
        words = argv or [line]
        for attempt in (1, 2):
            try:
                return await self._start_once(line, argv, tty)
            except LimitExceeded as exc:
                victim = _least_recent(self._ptys)
                if attempt == 2 or victim is None:
                    raise transport_error(words, exc) from exc
                await self._drop(victim)
            except SandgridError as exc:
                raise transport_error(words, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _start_once(self, line: str, argv: list[str] | None, tty: bool) -> _Entry:
        sid = self.sandgrid_session_id
        if tty:
            typed = shlex.join(argv) if argv else line
            return await self._grid(lambda: TerminalProcess.open(self._client, sid, typed))
        if argv is None:
            return PipeProcess(
                await self._grid(lambda: self._client.start_process(sid, shell=line))
            )
        return PipeProcess(await self._grid(lambda: self._client.start_process(sid, argv)))

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Send ``chars`` to the process; answer what it wrote since the last call."""
        entry = self._ptys.get(session_id)
        if entry is None:
            raise PtySessionNotFoundError(session_id=session_id)
        if chars:
            try:
                await entry.send(chars)
            except SandgridError as exc:
                raise transport_error(["write_stdin"], exc) from exc
        wait_ms = int((DEFAULT_WRITE_YIELD_S if yield_time_s is None else yield_time_s) * 1000)
        wait_ms = resolve_pty_write_yield_time_ms(yield_time_ms=wait_ms, input_empty=chars == "")
        return await self._collect(session_id, wait_ms, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        """Kill every process the PTY methods started (those still running)."""
        entries, self._pty_table = list(self._ptys.values()), {}
        for entry in entries:
            await self._end(entry)

    async def _drop(self, pid: int | None) -> None:
        entry = self._ptys.pop(pid, None) if pid is not None else None
        if entry is not None:
            await self._end(entry)

    async def _collect(
        self, pid: int, wait_ms: int, max_output_tokens: int | None
    ) -> PtyExecUpdate:
        entry = self._ptys[pid]
        entry.last_used = time.monotonic()
        try:
            polled = await entry.poll(wait_ms / 1000)
        except SandgridError as exc:
            self._ptys.pop(pid, None)
            await self._end(entry)
            raise transport_error([f"pty:{pid}"], exc) from exc
        text, count = truncate_text_by_tokens(_with_notice(polled), max_output_tokens)
        if polled.exit_code is None:
            return PtyExecUpdate(pid, text.encode(), None, count)
        self._ptys.pop(pid, None)
        if isinstance(entry, TerminalProcess):
            await self._end(entry)
        return PtyExecUpdate(None, text.encode(), polled.exit_code, count)


def _with_notice(polled: PtyPoll) -> str:
    text = polled.data.decode("utf-8", errors="replace")
    if polled.dropped:
        return f"[sandgrid: {polled.dropped} earlier bytes dropped: the buffer was full]\n{text}"
    return text


def _prune_choice(entries: dict[int, _Entry]) -> int | None:
    """The process the SDK would drop for a new one (an exited one first, then the oldest)."""
    meta = [(pid, e.last_used, False) for pid, e in entries.items()]
    return process_id_to_prune_from_meta(meta)


def _least_recent(entries: dict[int, _Entry]) -> int | None:
    return min(entries, key=lambda pid: entries[pid].last_used) if entries else None
