"""Handles on background processes: ``BackgroundProcess`` and ``AsyncBackgroundProcess``.

Thin shells like the clients: each method sends one call built in
``_process_calls``. A handle is plain data (session, pid, sandbox), so any
client or process that has those can steer the process: build one with
``client.process(session_id, pid, sandbox)``.

``wait`` loops over bounded waits (the sandbox serves one request at a time,
so no call holds it more than 10 s); a turn of the session in flight meanwhile
(409 ``session_busy``) only delays the next step.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from sandgrid.client import _process_calls as calls
from sandgrid.errors import ErrorCode, SandgridError
from sandgrid.processes import ProcessInfo, ProcessLogs

if TYPE_CHECKING:
    from sandgrid.client._async import AsyncClient
    from sandgrid.client._sync import Client

__all__ = ["BUSY_PAUSE_S", "AsyncBackgroundProcess", "BackgroundProcess"]

BUSY_PAUSE_S = 0.2
"""How long ``wait`` pauses when another turn of the session holds it."""


def _left(end: float | None) -> float | None:
    return None if end is None else end - time.monotonic()


class BackgroundProcess:
    """A background process of a session (from ``Session.exec(..., background=True)``)."""

    def __init__(self, client: Client, session_id: str, info: ProcessInfo) -> None:
        self.client, self.session_id, self.info = client, session_id, info

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def sandbox(self) -> str:
        return self.info.sandbox

    def wait(self, timeout: float | None = None) -> ProcessInfo:
        """Wait until the process ends or ``timeout`` seconds pass (None: no limit);
        ``running`` in the answer says which. Raises ``process_lost`` if it is gone."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            step = calls.wait_step(_left(end))
            try:
                self.info = self.client._send(
                    calls.wait_call(self.session_id, self.pid, self.sandbox, step)
                )
            except SandgridError as exc:
                if exc.code != ErrorCode.SESSION_BUSY:
                    raise
                time.sleep(BUSY_PAUSE_S)
            left = _left(end)
            if not self.info.running or (left is not None and left <= 0):
                return self.info

    def kill(self, signal: str = "TERM") -> ProcessInfo:
        """Send ``signal`` (TERM, KILL, INT, HUP, QUIT, USR1, USR2) to its process group."""
        call = calls.kill_call(self.session_id, self.pid, self.sandbox, signal)
        self.info = self.client._send(call)
        return self.info

    def send_stdin(self, data: str, *, eof: bool = False) -> int:
        """Write ``data`` to its stdin (``eof`` closes it); the bytes it took."""
        call = calls.stdin_call(self.session_id, self.pid, self.sandbox, data, eof)
        return self.client._send(call)

    def logs(self, since: int = 0) -> ProcessLogs:
        """Its output (stdout and stderr merged) from the absolute offset ``since``;
        read on from the answer's ``offset``; ``skipped`` counts dropped bytes."""
        return self.client._send(calls.logs_call(self.session_id, self.pid, self.sandbox, since))


class AsyncBackgroundProcess:
    """``BackgroundProcess`` for ``AsyncClient``: the same methods, awaited."""

    def __init__(self, client: AsyncClient, session_id: str, info: ProcessInfo) -> None:
        self.client, self.session_id, self.info = client, session_id, info

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def sandbox(self) -> str:
        return self.info.sandbox

    async def wait(self, timeout: float | None = None) -> ProcessInfo:
        """See ``BackgroundProcess.wait``."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            step = calls.wait_step(_left(end))
            try:
                self.info = await self.client._send(
                    calls.wait_call(self.session_id, self.pid, self.sandbox, step)
                )
            except SandgridError as exc:
                if exc.code != ErrorCode.SESSION_BUSY:
                    raise
                await asyncio.sleep(BUSY_PAUSE_S)
            left = _left(end)
            if not self.info.running or (left is not None and left <= 0):
                return self.info

    async def kill(self, signal: str = "TERM") -> ProcessInfo:
        """See ``BackgroundProcess.kill``."""
        call = calls.kill_call(self.session_id, self.pid, self.sandbox, signal)
        self.info = await self.client._send(call)
        return self.info

    async def send_stdin(self, data: str, *, eof: bool = False) -> int:
        """See ``BackgroundProcess.send_stdin``."""
        call = calls.stdin_call(self.session_id, self.pid, self.sandbox, data, eof)
        return await self.client._send(call)

    async def logs(self, since: int = 0) -> ProcessLogs:
        """See ``BackgroundProcess.logs``."""
        call = calls.logs_call(self.session_id, self.pid, self.sandbox, since)
        return await self.client._send(call)
