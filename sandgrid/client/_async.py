"""The asynchronous SDK: ``AsyncClient``, its ``AsyncSession`` and ``AsyncBackgroundProcess``.

    async with AsyncClient() as client, client.session(type="python") as s:
        await s.write_file("a.py", "print(6 * 7)")
        print((await s.exec(["python3", "a.py"])).stdout)

Same methods and signatures as the synchronous ``Client`` (a test checks): the
one-call methods are the base's tables, read as coroutine methods; what is
written here is how a call is sent, and the methods that do more I/O than one
send (streams, terminals, handles).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Generator
from types import TracebackType
from typing import Any, Literal, TypeVar, Unpack, overload

import anyio
import httpx

from sandgrid.audit import AuditRecord
from sandgrid.client import _process_calls as procs
from sandgrid.client import _requests as api
from sandgrid.client._base import BaseClient, ProcessHandle, SessionHandle
from sandgrid.client._call import Call, transport_errors
from sandgrid.client._ports import port_base
from sandgrid.client._process_calls import ProcessRef
from sandgrid.client._pty import AsyncTerminal, TerminalOptions, terminal_url
from sandgrid.client._requests import (
    Argv,
    AuditFilters,
    CommandOptions,
    ExecOptions,
    OutputOptions,
    SessionOptions,
)
from sandgrid.client._shell import AsyncClosing, AsyncHandle, AsyncShell
from sandgrid.client._stream import AsyncTurnStream, deliver
from sandgrid.errors import SandgridError
from sandgrid.models import ExecResult, SessionInfo
from sandgrid.processes import ProcessInfo

__all__ = ["AsyncBackgroundProcess", "AsyncClient", "AsyncSession", "AsyncSessionOpener"]

T = TypeVar("T")


class AsyncClient(BaseClient[httpx.AsyncBaseTransport], AsyncShell, AsyncClosing):
    """An asyncio client of the sandgrid API over one pooled HTTP connection set.

    Args: as ``BaseClient``'s; ``transport`` is an ``httpx.AsyncBaseTransport``.
    """

    def _connect(self, transport: httpx.AsyncBaseTransport | None) -> None:
        self._http = httpx.AsyncClient(transport=transport, **self._http_options())

    async def _send(self, call: Call[T]) -> T:
        """Send ``call``, retrying as ``self.retry`` says (the decision is the base's)."""
        retrying = self.retry.retrying(call)
        while True:
            try:
                return await self._send_once(call)
            except SandgridError as exc:
                await anyio.sleep(retrying.wait_after(exc))

    async def _send_once(self, call: Call[T]) -> T:
        with transport_errors(self.base_url):
            response = await self._http.send(call.build(self._http, call.timeout))
        return call.read(response)

    def session(
        self, type: str = "python", **options: Unpack[SessionOptions]
    ) -> AsyncSessionOpener:
        """Create a session: ``await`` it for the handle, or ``async with`` it to close on exit."""
        return AsyncSessionOpener(self.create_session(type, **options), self)

    async def attach(self, session_id: str) -> AsyncSession:
        """A handle on an existing session of the caller's tenant."""
        return AsyncSession(self, await self.get_session(session_id))

    async def exec(
        self, session_id: str, argv: Argv = None, **options: Unpack[OutputOptions]
    ) -> ExecResult:
        """See ``Client.exec``."""
        call = api.exec_call(session_id, argv, **options)
        out, err = options.get("on_stdout"), options.get("on_stderr")
        if out is None and err is None:
            return await self._send(call)
        stream = await AsyncTurnStream(self, session_id)._open(api.streamed(call))
        async for event in stream:
            deliver(event, out, err)
        return await stream.wait()

    async def exec_stream(
        self, session_id: str, argv: Argv = None, **options: Unpack[ExecOptions]
    ) -> AsyncTurnStream:
        """Start one command and answer its events as they happen (an ``AsyncTurnStream``:
        iterate it, ``await wait()`` for the result, ``await cancel()`` it)."""
        call = api.exec_stream_call(session_id, argv, **options)
        return await AsyncTurnStream(self, session_id)._open(call)

    async def events(self, session_id: str, turn_id: str, *, after: str = "0") -> AsyncTurnStream:
        """Re-attach to a streamed turn: its events after offset ``after`` (an event id)."""
        call = api.events_call(session_id, turn_id, after)
        return await AsyncTurnStream(self, session_id)._open(call)

    async def start_process(
        self, session_id: str, argv: Argv = None, **command: Unpack[CommandOptions]
    ) -> AsyncBackgroundProcess:
        """See ``Client.start_process``."""
        info = await self._send(procs.start_call(session_id, argv, **command))
        return AsyncBackgroundProcess(self, session_id, info)

    async def process(self, session_id: str, pid: int, sandbox: str = "") -> AsyncBackgroundProcess:
        """See ``Client.process``."""
        info = ProcessInfo(pid=pid, argv=[], running=True, started_at=0.0, sandbox=sandbox)
        return AsyncBackgroundProcess(self, session_id, info)

    async def pty(self, session_id: str, **options: Unpack[TerminalOptions]) -> AsyncTerminal:
        """See ``Client.pty``."""
        url = terminal_url(self.base_url, session_id, options)
        return await AsyncTerminal.open(url, self._headers())

    async def audit_records(self, **filters: Unpack[AuditFilters]) -> AsyncIterator[AuditRecord]:
        """Every record of the tenant's audit trail that matches, page after page
        (newest first unless ``order="asc"``), following each page's ``next_cursor``."""
        cursor: str | None = None
        while True:
            page = await self._send(api.audit(**filters, cursor=cursor))
            for rec in page.records:
                yield rec
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def close(self) -> None:
        """Close the HTTP connections (sessions stay open on the grid)."""
        await self._http.aclose()


class AsyncSession(SessionHandle[AsyncClient], AsyncHandle[str], AsyncClosing):
    """A handle on one session; ``async with`` closes the session on exit."""

    @overload
    async def exec(
        self,
        argv: Argv = None,
        *,
        background: Literal[False] = False,
        **options: Unpack[OutputOptions],
    ) -> ExecResult: ...

    @overload
    async def exec(
        self, argv: Argv = None, *, background: Literal[True], **options: Unpack[ExecOptions]
    ) -> AsyncBackgroundProcess: ...

    async def exec(
        self, argv: Argv = None, *, background: bool = False, **options: Unpack[OutputOptions]
    ) -> ExecResult | AsyncBackgroundProcess:
        """See ``Session.exec``."""
        if not background:
            return await self.client.exec(self.id, argv, **options)
        command = procs.background_command(options)
        proc = await self.client.start_process(self.id, argv, **command)
        if (stdin := options.get("stdin")) is not None:
            await proc.send_stdin(stdin)
        return proc

    async def exec_stream(
        self, argv: Argv = None, **options: Unpack[ExecOptions]
    ) -> AsyncTurnStream:
        return await self.client.exec_stream(self.id, argv, **options)

    async def events(self, turn_id: str, *, after: str = "0") -> AsyncTurnStream:
        return await self.client.events(self.id, turn_id, after=after)

    async def pty(self, **options: Unpack[TerminalOptions]) -> AsyncTerminal:
        """Open an interactive terminal on this session (see ``Client.pty``)."""
        return await self.client.pty(self.id, **options)

    def http(self, port: int, *, timeout: float | None = None) -> httpx.AsyncClient:
        """An httpx client bound to ``port`` of this session's sandbox (the port route,
        with the token): ``await s.http(8000).get("/api")``. Close it (``async with``)."""
        return httpx.AsyncClient(
            base_url=port_base(self.client.base_url, self.id, port),
            headers=self.client._headers(),
            timeout=self.client.timeout if timeout is None else timeout,
        )

    async def fork(self, count: int = 1, memory: bool = False) -> list[AsyncSession]:
        """``count`` new sessions from this one (``AsyncClient.fork``); this one keeps running."""
        reply = await self.client.fork(self.id, count, memory)
        return [AsyncSession(self.client, s) for s in reply.sessions]

    async def refresh(self) -> SessionInfo:
        self.info = await self.client.get_session(self.id)
        return self.info

    async def close(self) -> SessionInfo:
        """Close the session on the grid; its container is destroyed."""
        self.info = await self.client.close_session(self.id)
        return self.info


class AsyncSessionOpener:
    """What ``AsyncClient.session`` returns: awaitable, and an async context manager.

    ``s = await client.session()`` creates the session; ``async with
    client.session() as s:`` creates it and closes it on exit.
    """

    def __init__(self, create: Coroutine[Any, Any, SessionInfo], client: AsyncClient) -> None:
        self._create = create
        self._client = client
        self._session: AsyncSession | None = None

    async def _open(self) -> AsyncSession:
        if self._session is None:
            self._session = AsyncSession(self._client, await self._create)
        return self._session

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncSession:
        return await self._open()

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()


class AsyncBackgroundProcess(ProcessHandle[AsyncClient], AsyncHandle[ProcessRef]):
    """``BackgroundProcess`` for ``AsyncClient``: the same methods, awaited."""

    async def wait(self, timeout: float | None = None) -> ProcessInfo:
        """See ``BackgroundProcess.wait``."""
        waiting = procs.Waiting(self._ref, timeout)
        while True:
            try:
                self.info = await self._send(waiting.call())
            except SandgridError as exc:
                await asyncio.sleep(waiting.pause(exc))
            if waiting.done(self.info):
                return self.info

    async def kill(self, signal: str = "TERM") -> ProcessInfo:
        """See ``BackgroundProcess.kill``."""
        self.info = await self._send(procs.kill_call(self._ref, signal))
        return self.info
