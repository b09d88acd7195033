"""The pure parts of streamed turns: the SSE parser, the SDK's stream bookkeeping,
and the turn stream in Redis (offsets, trimming flagged, the cancel flag); the
SDK's streams re-attaching after a broken connection (a mock API)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest
import redis

from sandgrid.client import AsyncClient, Client
from sandgrid.client._stream import StreamState, deliver
from sandgrid.errors import Conflict, InvalidInput
from sandgrid.streaming import EVENT_STREAM, TURN_ID_HEADER, SSEParser, TurnEvent
from sandgrid.wire import turnstream


def _lines(*frames: tuple[str, dict[str, object]]) -> list[str]:
    out: list[str] = [": keep-alive", ""]
    for eid, body in frames:
        out += [f"id: {eid}", f"event: {body['type']}", f"data: {json.dumps(body)}", ""]
    return out


def test_parser_yields_events_with_their_ids_and_skips_comments() -> None:
    parser = SSEParser()
    lines = _lines(
        ("1-0", {"type": "stdout", "data": "a\n"}), ("2-0", {"type": "stderr", "data": "e"})
    )
    events = [e for e in (parser.feed(line) for line in lines) if e is not None]
    assert [(e.id, e.type, e.data) for e in events] == [
        ("1-0", "stdout", "a\n"),
        ("2-0", "stderr", "e"),
    ]


def test_state_tracks_offset_and_raises_the_final_error() -> None:
    state = StreamState("s1")
    body = {
        "type": "error",
        "error": {"type": "Conflict", "code": "session_busy", "message": "busy"},
    }
    for line in _lines(("5-1", {"type": "stdout", "data": "x"}), ("6-0", body)):
        state.feed(line)
    assert state.last_id == "6-0" and state.final is not None and state.final.final
    with pytest.raises(Conflict):
        state.outcome()


def test_a_stream_without_a_final_event_is_an_error_not_a_result() -> None:
    with pytest.raises(Exception, match="ended without a result"):
        StreamState("s1").outcome()


def test_deliver_routes_chunks_to_their_callbacks() -> None:
    out: list[str] = []
    err: list[str] = []
    for kind in ("stdout", "stderr", "dropped"):
        deliver(TurnEvent(type=kind, data=kind), out.append, err.append)  # type: ignore[arg-type]
    assert out == ["stdout"] and err == ["stderr"]


def test_offsets_are_checked_naming_the_field() -> None:
    assert turnstream.check_offset("0") == "0"
    assert turnstream.check_offset("1700000000000-3") == "1700000000000-3"
    with pytest.raises(InvalidInput) as err:
        turnstream.check_offset("$")
    assert err.value.context["field"] == "after"


def test_reads_after_an_offset_get_each_event_once(redis_client: redis.Redis[str]) -> None:
    ids = turnstream.append(
        redis_client, "t1", [{"type": "stdout", "data": str(i)} for i in range(5)]
    )
    first = turnstream.read(redis_client, "t1", "0")
    assert [e.event["data"] for e in first.entries] == ["0", "1", "2", "3", "4"] and not first.gap
    rest = turnstream.read(redis_client, "t1", ids[1])
    assert [e.event["data"] for e in rest.entries] == ["2", "3", "4"]
    assert turnstream.finished(redis_client, "t1") is None
    turnstream.append(redis_client, "t1", [{"type": "result", "result": {}}])
    assert (turnstream.finished(redis_client, "t1") or {}).get("type") == "result"
    assert 0 < redis_client.ttl("sg:turn:t1:events") <= turnstream.TTL_S


def test_the_stream_is_bounded_and_a_reader_past_the_trim_is_told(
    redis_client: redis.Redis[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(turnstream, "MAXLEN", 10)
    pipe = [{"type": "stdout", "data": str(i)} for i in range(500)]
    first = turnstream.append(redis_client, "t2", pipe[:1])[0]
    turnstream.append(redis_client, "t2", pipe[1:])
    assert redis_client.xlen("sg:turn:t2:events") < 500  # trimmed (approximately) to MAXLEN
    assert turnstream.read(redis_client, "t2", first).gap
    assert not turnstream.read(redis_client, "t2", "9999999999999-0").gap


def test_the_cancel_flag(redis_client: redis.Redis[str]) -> None:
    assert not turnstream.cancel_requested(redis_client, "t3")
    turnstream.request_cancel(redis_client, "t3")
    assert turnstream.cancel_requested(redis_client, "t3")


def test_the_cancel_check_never_fails_a_turn() -> None:
    import redis as redis_lib

    from sandgrid.wire import turnstream

    down = redis_lib.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    assert turnstream.cancel_requested(down, "t-any") is False  # unreachable: run it


class _Broken(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that sends ``chunks`` and then breaks, as a dropped connection does."""

    def __init__(self, *chunks: str) -> None:
        self.chunks = [c.encode() for c in chunks]

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        raise httpx.ReadError("connection dropped")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection dropped")


def _sse(eid: str, body: dict[str, object]) -> str:
    return "\n".join(_lines((eid, body))[2:]) + "\n"


RESULT = {"type": "result", "result": {"exit_code": 0, "stdout": "ab"}}


def _api(seen: list[str]) -> httpx.MockTransport:
    """The exec's stream breaks after its first event; the re-attach sends the rest."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path} {request.url.params.get('after', '')}")
        headers = {TURN_ID_HEADER: "t-1", "Content-Type": EVENT_STREAM}
        if request.method == "POST":
            return httpx.Response(
                200, headers=headers, stream=_Broken(_sse("1-0", {"type": "stdout", "data": "a"}))
            )
        rest = _sse("2-0", {"type": "stdout", "data": "b"}) + _sse("3-0", RESULT)
        return httpx.Response(200, headers=headers, content=rest.encode())

    return httpx.MockTransport(answer)


def test_a_broken_stream_reattaches_after_the_last_event_sync() -> None:
    seen: list[str] = []
    with Client("http://api", "tok", transport=_api(seen)) as client:
        stream = client.exec_stream("s-1", shell="echo")
        ids = [e.id for e in stream]
    assert ids == ["1-0", "2-0", "3-0"] and stream.state.outcome().stdout == "ab"
    assert seen == ["POST /v1/sessions/s-1/exec ", "GET /v1/sessions/s-1/turns/t-1/events 1-0"]


def test_a_broken_stream_reattaches_after_the_last_event_async() -> None:
    seen: list[str] = []

    async def run() -> list[str]:
        async with AsyncClient("http://api", "tok", transport=_api(seen)) as client:
            stream = await client.exec_stream("s-1", shell="echo")
            return [e.id async for e in stream]

    assert anyio.run(run) == ["1-0", "2-0", "3-0"]
    assert seen == ["POST /v1/sessions/s-1/exec ", "GET /v1/sessions/s-1/turns/t-1/events 1-0"]
