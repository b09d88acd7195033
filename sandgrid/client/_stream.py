"""Streamed turns in the SDK: ``TurnStream`` (sync) and ``AsyncTurnStream`` (async).

A handle on one streamed exec: iterate it for ``TurnEvent`` objects as the
turn produces them, ``wait()`` for its ``ExecResult`` (the error the turn
ended with is raised, as by ``exec``), ``cancel()`` it by its ``turn_id``. When
the connection breaks mid-turn, the handle re-attaches after the last event
it saw (``GET .../turns/{turn_id}/events?after=``): no event is lost or
repeated. What both shells share (the bookkeeping, the SSE parsing, when and
how to re-attach) is the pure ``StreamState``; a shell only reads lines.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from sandgrid.client._base import BaseClient
from sandgrid.client._call import Call, raise_for_error, transport_error, transport_errors
from sandgrid.client._requests import ChunkHandler, events_call
from sandgrid.client._shell import Closing
from sandgrid.errors import ErrorCode, InfrastructureError, error_from_body
from sandgrid.models import ExecResult
from sandgrid.streaming import TURN_ID_HEADER, SSEParser, TurnCancel, TurnEvent

if TYPE_CHECKING:
    from sandgrid.client._async import AsyncClient
    from sandgrid.client._sync import Client

__all__ = ["AsyncTurnStream", "StreamState", "TurnStream", "deliver"]


def deliver(
    event: TurnEvent, on_stdout: ChunkHandler | None, on_stderr: ChunkHandler | None
) -> None:
    """Hand a chunk event to its callback (other events are not output)."""
    if event.type == "stdout" and on_stdout is not None:
        on_stdout(event.data)
    elif event.type == "stderr" and on_stderr is not None:
        on_stderr(event.data)


class StreamState:
    """What a stream handle has seen: the turn, the last offset, the final event."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.turn_id = ""
        self.last_id = "0"
        self.final: TurnEvent | None = None
        self._parser = SSEParser()

    def opened(self, response: httpx.Response) -> None:
        """A response began: learn the turn id from its header; an error answer (its
        body read) is raised."""
        if response.status_code >= 300:
            raise_for_error(response)
        self.turn_id = response.headers.get(TURN_ID_HEADER, self.turn_id)

    def feed(self, line: str) -> TurnEvent | None:
        """One SSE line; the event it completes (its offset and finality noted)."""
        event = self._parser.feed(line)
        if event is not None:
            self.last_id = event.id or self.last_id
            if event.final:
                self.final = event
        return event

    def events(self, lines: Iterable[str]) -> Iterator[TurnEvent]:
        """The events that ``lines`` complete (``feed`` over each)."""
        return (event for line in lines if (event := self.feed(line)) is not None)

    def restart(self) -> None:
        """A new connection: drop a half-read event (it is sent again after ``last_id``)."""
        self._parser = SSEParser()

    def ended(self) -> None:
        """The response ended: before the final event, that is a broken stream."""
        if self.final is None:
            raise httpx.RemoteProtocolError("the event stream ended early")

    def broke(self, exc: httpx.TransportError, tries: int, client: BaseClient[Any]) -> Call[None]:
        """The connection broke (the ``tries``-th time): the call that re-attaches after
        the last event seen, or the transport error once the client's retries are spent."""
        if tries > client.retry.attempts:
            raise transport_error(exc, client.base_url) from exc
        self.restart()
        return events_call(self.session_id, self.turn_id, self.last_id)

    def outcome(self) -> ExecResult:
        """The turn's result, or the error it ended with raised."""
        if self.final is None:
            raise InfrastructureError(
                f"the event stream of turn {self.turn_id} ended without a result",
                code=ErrorCode.WORKER_LOST,
                operation="exec",
                context={"turn": self.turn_id},
            )
        if self.final.type == "error":
            raise error_from_body(self.final.error or {})
        assert self.final.result is not None
        return self.final.result


class TurnStream(Closing):
    """A streamed exec (``Client.exec_stream``), or a re-attached turn (``Client.events``)."""

    def __init__(self, client: Client, session_id: str, call: Call[Any]) -> None:
        self._client = client
        self.state = StreamState(session_id)
        self._response = self._open(call)

    @property
    def turn_id(self) -> str:
        return self.state.turn_id

    def _open(self, call: Call[Any]) -> httpx.Response:
        http = self._client._http
        with transport_errors(self._client.base_url):
            response = http.send(call.build(http), stream=True)
        if response.status_code >= 300:
            response.read()  # for the error's body; the response is closed at its end
        self.state.opened(response)
        self._lines = response.iter_lines()  # one per response: a handle may be iterated again
        return response

    def __iter__(self) -> Iterator[TurnEvent]:
        tries = 0
        while self.state.final is None:
            try:
                yield from self._read()
            except httpx.TransportError as exc:
                tries += 1
                call = self.state.broke(exc, tries, self._client)
                self._response.close()
                self._response = self._open(call)
        self.close()

    def _read(self) -> Iterator[TurnEvent]:
        """The open response's events, up to the final one."""
        for event in self.state.events(self._lines):
            yield event
            if event.final:
                return
        self.state.ended()

    def wait(self) -> ExecResult:
        """Read to the end; the turn's result (its error raised)."""
        for _ in self:
            pass
        return self.state.outcome()

    def cancel(self) -> TurnCancel:
        """Cancel the turn: its processes are killed, its result says ``cancelled``."""
        return self._client.cancel(self.state.session_id, self.state.turn_id)

    def close(self) -> None:
        """Stop reading (the turn runs on; ``Client.events`` re-attaches)."""
        self._response.close()


class AsyncTurnStream:
    """The async twin of ``TurnStream``: ``async for``, ``await wait()``, ``await cancel()``."""

    def __init__(self, client: AsyncClient, session_id: str) -> None:
        self._client = client
        self.state = StreamState(session_id)
        self._response: httpx.Response | None = None
        self._lines: AsyncIterator[str] | None = None

    @property
    def turn_id(self) -> str:
        return self.state.turn_id

    async def _open(self, call: Call[Any]) -> AsyncTurnStream:
        http = self._client._http
        with transport_errors(self._client.base_url):
            response = await http.send(call.build(http), stream=True)
        if response.status_code >= 300:
            await response.aread()
        self.state.opened(response)
        self._response = response
        self._lines = response.aiter_lines()  # one per response: iterated again, it goes on
        return self

    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[TurnEvent]:
        tries = 0
        while self.state.final is None and self._response is not None:
            try:
                async for event in self._read():
                    yield event
            except httpx.TransportError as exc:
                tries += 1
                call = self.state.broke(exc, tries, self._client)
                await self._response.aclose()
                await self._open(call)
        await self.aclose()

    async def _read(self) -> AsyncIterator[TurnEvent]:
        """The open response's events, up to the final one."""
        assert self._lines is not None
        async for line in self._lines:
            if (event := self.state.feed(line)) is not None:
                yield event
                if event.final:
                    return
        self.state.ended()

    async def wait(self) -> ExecResult:
        """Read to the end; the turn's result (its error raised)."""
        async for _ in self:
            pass
        return self.state.outcome()

    async def cancel(self) -> TurnCancel:
        """Cancel the turn: its processes are killed, its result says ``cancelled``."""
        return await self._client.cancel(self.state.session_id, self.state.turn_id)

    async def aclose(self) -> None:
        """Stop reading (the turn runs on; ``AsyncClient.events`` re-attaches)."""
        if self._response is not None:
            await self._response.aclose()

    async def __aenter__(self) -> AsyncTurnStream:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
