"""A turn's events in a Redis Stream: what the worker writes and the API serves.

One stream per turn (``names.turn_events_key``), bounded (``MAXLEN`` entries,
older ones trimmed) and expiring (``TTL_S`` after its last write). Each entry
is one event, JSON in the field ``e``:

    ``{"type": "turn", "turn_id", "session"}``   first: which turn this is (API)
    ``{"type": "stdout" | "stderr", "data"}``    output, in the order written (worker)
    ``{"type": "dropped", "bytes"}``              output the worker's buffer let go
    ``{"type": "result", "result"}``              last: the ``ExecResult`` (API)
    ``{"type": "error", "error"}``                last: the error body (API)

The entry id is the event's offset: a reader that resumes ``after`` an id gets
exactly the entries after it, none twice and none skipped, unless the stream
was trimmed past it meanwhile; ``read`` then says so (``gap``), from the
stream's counters, rather than pretend nothing was lost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from sandgrid.errors import InvalidInput
from sandgrid.wire import names

__all__ = [
    "CANCEL_TTL_S",
    "FINAL_TYPES",
    "MAXLEN",
    "TTL_S",
    "Entry",
    "Read",
    "append",
    "aread",
    "cancel_requested",
    "check_offset",
    "finished",
    "read",
    "request_cancel",
]

#: Entries kept per turn: older ones are trimmed (a reader that lags is told).
MAXLEN = 10_000
#: Seconds a turn's stream outlives its last event (re-attach within this).
TTL_S = 3600
#: Seconds a cancel flag is kept: longer than any turn may wait in a queue.
CANCEL_TTL_S = 3600
#: The event types that end a turn's stream.
FINAL_TYPES = frozenset({"result", "error"})

_OFFSET = re.compile(r"^(0|\d{1,20}-\d{1,20})$")


@dataclass(frozen=True)
class Entry:
    """One event and its offset (the stream entry id)."""

    id: str
    event: dict[str, Any]


@dataclass(frozen=True)
class Read:
    """What one ``read`` found: the entries, and whether some before them were trimmed."""

    entries: list[Entry]
    gap: bool = False


def check_offset(offset: str, field: str = "after") -> str:
    """An offset a client sent (``0`` or an entry id), or ``InvalidInput`` naming it."""
    if not _OFFSET.match(offset):
        raise InvalidInput(
            f"{field} must be 0 or an event id like 1700000000000-0, got {offset[:64]!r}",
            operation="turns.events",
            context={"field": field, "rule": "0 or <ms>-<seq>"},
        )
    return offset


def append(client: redis.Redis[str], turn_id: str, events: Sequence[dict[str, Any]]) -> list[str]:
    """Append events in one round trip (trimmed to ``MAXLEN``, TTL renewed); their ids."""
    if not events:
        return []
    key = names.turn_events_key(turn_id)
    pipe = client.pipeline(transaction=False)
    for event in events:
        pipe.xadd(key, {"e": json.dumps(event)}, maxlen=MAXLEN, approximate=True)
    pipe.expire(key, TTL_S)
    ids = pipe.execute()[:-1]
    return [i.decode() if isinstance(i, bytes) else str(i) for i in ids]


def read(client: redis.Redis[str], turn_id: str, after: str, *, block_ms: int = 0) -> Read:
    """The entries after offset ``after`` (``0``: from the start), waiting up to
    ``block_ms`` for one when there is none yet (0: do not wait)."""
    key = names.turn_events_key(turn_id)
    gap = _trimmed_past(client, key, after)
    found = client.xread({key: after}, count=512, block=block_ms or None)
    return Read(_entries(found), gap)


async def aread(
    client: aioredis.Redis[str], turn_id: str, after: str, *, block_ms: int = 0
) -> Read:
    """``read`` on the asyncio client: a stream served to a client holds no thread."""
    key = names.turn_events_key(turn_id)
    try:
        gap = _gap(await client.xinfo_stream(key), after)
    except redis.ResponseError:  # no such key: nothing written, nothing trimmed
        gap = False
    found = await client.xread({key: after}, count=512, block=block_ms or None)
    return Read(_entries(found), gap)


def _entries(found: Any) -> list[Entry]:
    return [
        Entry(_text(eid), json.loads(_text(fields.get(b"e", fields.get("e", "{}")))))
        for _stream, items in found or []
        for eid, fields in items
    ]


def finished(client: redis.Redis[str], turn_id: str) -> dict[str, Any] | None:
    """The final event of a turn's stream, or None while it runs (or has no stream)."""
    last = client.xrevrange(names.turn_events_key(turn_id), count=1)
    if not last:
        return None
    _eid, fields = last[0]
    event: dict[str, Any] = json.loads(_text(fields.get(b"e", fields.get("e", "{}"))))
    return event if event.get("type") in FINAL_TYPES else None


def request_cancel(client: redis.Redis[str], turn_id: str) -> None:
    """Set the turn's cancel flag alone (the API's ``SessionRegistry.cancel_turn`` sets
    it beside the turn record's mark, which a worker's claim reads)."""
    client.set(names.turn_cancel_key(turn_id), "1", ex=CANCEL_TTL_S)


def cancel_requested(client: redis.Redis[str], turn_id: str) -> bool:
    """Whether the turn was cancelled (checked by the worker before it runs an exec
    whose claim did not read the record's mark last: ``worker.turns.interactive``).

    Best effort: with Redis unreachable the turn runs (a cancel sent meanwhile
    still reaches it on the node's queue); the check never fails a turn.
    """
    try:
        return bool(client.exists(names.turn_cancel_key(turn_id)))
    except redis.RedisError:
        return False


def _trimmed_past(client: redis.Redis[str], key: str, after: str) -> bool:
    """Whether entries after ``after`` may have been trimmed before this reader saw them.

    Trimming removes the oldest entries, so once any were trimmed, a reader whose
    offset is older than the first entry kept may have missed some: it is told
    (at worst once too often, when its offset was the very last one trimmed;
    never too seldom).
    """
    try:
        info = client.xinfo_stream(key)
    except redis.ResponseError:  # no such key: nothing written, nothing trimmed
        return False
    return _gap(info, after)


def _gap(info: dict[str, Any], after: str) -> bool:
    """``_trimmed_past`` from the stream's ``XINFO STREAM`` reply."""
    if int(info.get("entries-added") or 0) <= int(info.get("length") or 0):
        return False
    first = info.get("recorded-first-entry-id") or (info.get("first-entry") or ("0-0",))[0]
    return _id_tuple(after) < _id_tuple(_text(first))


def _id_tuple(eid: str) -> tuple[int, int]:
    ms, _, seq = eid.partition("-")
    return int(ms), int(seq or 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
