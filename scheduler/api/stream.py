"""Routes of interactive turns: a streamed exec (SSE), re-attach, cancel.

A streamed exec names its turn first (``Sandgrid-Turn-Id`` header and the
``turn`` event), runs it in a thread of its own, and serves the turn's Redis
Stream (``sandgrid.wire.turnstream``) as Server-Sent Events: the worker appends
the output chunks, this process the final ``result`` or ``error``. So the
client that started the turn and one that re-attaches later read the very same
events from the very same offsets; a client that goes away only stops reading
(the turn runs on, its stream bounded and expiring).

Each stream holds a slot of ``scheduler.api.stream_slots`` (a tenant's and a
session's streams open at once are capped, 429 beyond) from its answer's start
until the client goes. The events are read with the asyncio Redis client in
an async generator: an idle stream holds no thread of the threadpool, so no
number of open streams delays another tenant's requests.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
import redis.asyncio as aioredis
from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from sandgrid.errors import NotFound, SandgridError
from sandgrid.models import ExecRequest
from sandgrid.streaming import EVENT_STREAM, LAST_EVENT_ID_HEADER, TURN_ID_HEADER, TurnCancel
from sandgrid.wire import redis_connect, turnstream
from scheduler.api.deps import NO_BODY, CurrentTenant, Services, Svc
from scheduler.api.stream_slots import Slot, StreamSlots
from scheduler.registry.sessions import new_turn_id
from scheduler.tenants import Tenant
from scheduler.turns.admission import check_exec
from scheduler.turns.idempotency import turn_id_for

__all__ = [
    "IDLE_LIMIT_S",
    "READ_BLOCK_MS",
    "cancel_turn",
    "events_response",
    "exec_events",
    "frame",
    "router",
    "turn_events",
]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/sessions", tags=["turns"])

#: How long one read waits for an event (then a keep-alive comment is sent).
READ_BLOCK_MS = 1000
#: A stream with no event for this long (and no final one) ends with an error event.
IDLE_LIMIT_S = 3600.0


def exec_events(
    svc: Services,
    tenant: Tenant,
    session_id: str,
    body: ExecRequest,
    *,
    t0: float,
    idempotency_key: str | None,
) -> StreamingResponse:
    """Start a streamed exec and answer its events (the exec route, ``Accept: text/event-stream``).

    The request and the session are checked before the answer starts, so bad
    input and an unknown session are plain HTTP errors; what fails later (a
    busy session, a lost worker) is the stream's ``error`` event.
    """
    check_exec(tenant, body)
    svc.registry.get(tenant.name, session_id)
    slot = StreamSlots(svc.settings.streams).acquire(svc.redis, "stream", tenant.name, session_id)
    if idempotency_key is not None:
        turn_id = turn_id_for(tenant.name, session_id, idempotency_key)
    else:
        turn_id = new_turn_id()
    start = {"type": "turn", "turn_id": turn_id, "session": session_id}
    first = turnstream.append(svc.redis, turn_id, [start])[0]
    streamed = body.model_copy(update={"stream": True})
    threading.Thread(
        target=_run,
        args=(svc, tenant, session_id, streamed, t0, idempotency_key, turn_id),
        name=f"sandgrid-turn-{turn_id}",
        daemon=True,
    ).start()
    head = _frame(first, start)
    return _response(svc, turn_id, first, head, slot)


def _run(
    svc: Services,
    tenant: Tenant,
    session_id: str,
    body: ExecRequest,
    t0: float,
    key: str | None,
    turn_id: str,
) -> None:
    """Run the turn and append its final event, whatever happens."""
    event: dict[str, Any]
    try:
        result = svc.runner.exec(
            tenant, session_id, body, t0=t0, idempotency_key=key, turn_id=turn_id
        )
        event = {"type": "result", "result": result.model_dump(mode="json")}
    except SandgridError as exc:
        event = {"type": "error", "error": exc.to_body()["error"]}
    except Exception as exc:  # the stream must end, whatever the bug
        log.exception("streamed turn %s failed", turn_id)
        event = {
            "type": "error",
            "error": SandgridError(f"internal error: {exc}").to_body()["error"],
        }
    turnstream.append(svc.redis, turn_id, [event])


_AfterQuery = Annotated[
    str | None,
    Query(description="resume after this event id (0: from the start); else Last-Event-ID"),
]
_LastEventId = Annotated[str | None, Header(alias=LAST_EVENT_ID_HEADER)]


@router.get("/{session_id}/turns/{turn_id}/events")
def turn_events(
    session_id: str,
    turn_id: str,
    svc: Svc,
    tenant: CurrentTenant,
    after: _AfterQuery = None,
    last_event_id: _LastEventId = None,
) -> StreamingResponse:
    """Re-attach to a turn's events: every event after the offset, then live ones until
    the final ``result`` or ``error``; ``gap`` when some were trimmed meanwhile."""
    svc.registry.get(tenant.name, session_id)
    offset = turnstream.check_offset(after if after is not None else (last_event_id or "0"))
    head = turnstream.read(svc.redis, turn_id, "0")
    start = head.entries[0].event if head.entries else {}
    if start.get("type") != "turn" or start.get("session") != session_id:
        raise NotFound(
            f"no events of turn {turn_id!r} in session {session_id!r} (not streamed, "
            f"or older than {turnstream.TTL_S}s)",
            operation="turns.events",
            context={"turn": turn_id, "session": session_id},
        )
    slot = StreamSlots(svc.settings.streams).acquire(svc.redis, "stream", tenant.name, session_id)
    return _response(svc, turn_id, offset, "", slot)


@router.post(
    "/{session_id}/turns/{turn_id}/cancel", response_model=TurnCancel, dependencies=[NO_BODY]
)
def cancel_turn(session_id: str, turn_id: str, svc: Svc, tenant: CurrentTenant) -> TurnCancel:
    """Cancel a turn: its processes are killed (or it never starts) and its result says
    ``cancelled: true``; a finished turn is left alone (``state: finished``)."""
    session = svc.registry.get(tenant.name, session_id)
    return svc.runner.cancels.cancel(session, turn_id)


def events_response(svc: Services, stream_id: str, after: str, slot: Slot) -> StreamingResponse:
    """Serve the events of stream ``stream_id`` after ``after`` as SSE, until its final event
    (a template build's log, ``scheduler.api.templates``, is such a stream)."""
    return _response(svc, stream_id, after, "", slot)


def frame(event_id: str, event: dict[str, Any]) -> str:
    """One event as SSE text (``id:`` omitted when empty)."""
    return _frame(event_id, event)


def _response(svc: Services, turn_id: str, after: str, head: str, slot: Slot) -> StreamingResponse:
    return StreamingResponse(
        _events(svc, turn_id, after, head, slot),
        media_type=EVENT_STREAM,
        headers={TURN_ID_HEADER: turn_id, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _events(
    svc: Services, turn_id: str, after: str, head: str, slot: Slot
) -> AsyncIterator[str]:
    """The SSE text of a turn's events after ``after``, until its final event; the slot
    is released however the stream ends (its last event, or the client gone)."""
    client: aioredis.Redis[str] = redis_connect.connect_async(
        svc.settings.redis_url, decode_responses=True
    )
    slots = StreamSlots(svc.settings.streams)
    try:
        if head:
            yield head
        async for text in _follow(client, slots, slot, turn_id, after):
            yield text
    finally:  # shielded: a client that went cancels this generator's scope
        with anyio.CancelScope(shield=True):
            await slots.arelease(client, slot)
            await client.aclose()  # type: ignore[attr-defined]


async def _follow(
    client: aioredis.Redis[str], slots: StreamSlots, slot: Slot, turn_id: str, after: str
) -> AsyncIterator[str]:
    last, idle_since, gap_at = after, time.monotonic(), ""
    while True:
        await slots.arenew_due(client, slot)
        got = await turnstream.aread(client, turn_id, last, block_ms=READ_BLOCK_MS)
        if got.gap and gap_at != last:
            gap_at = last
            yield _frame("", {"type": "gap"})
        for entry in got.entries:
            last = entry.id
            yield _frame(entry.id, entry.event)
            if entry.event.get("type") in turnstream.FINAL_TYPES:
                return
        if got.entries:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_LIMIT_S:
            error = SandgridError(f"no event of turn {turn_id} for {IDLE_LIMIT_S:.0f}s")
            yield _frame("", {"type": "error", "error": error.to_body()["error"]})
            return
        else:
            yield ": keep-alive\n\n"


def _frame(event_id: str, event: dict[str, Any]) -> str:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event['type']}\ndata: {json.dumps(event)}\n\n"
