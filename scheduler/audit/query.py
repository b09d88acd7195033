"""Reading the audit trail: one page of a tenant's records, in either order, with a cursor.

A record lives in the tenant's Redis Stream until the exporter moves it to a
segment in the object store (``scheduler.audit.export``), and may for a moment
be in both. Its id (``<ms>-<seq>``, the stream's) orders the whole trail: the
store holds the oldest records, the stream the newest, and the segments,
named by their first id, hold disjoint ranges in id order.

A page is read from the stream first, then (when the stream had too few) from
the store: an export between the two reads leaves the moved records in the
store, written before they were trimmed, so none is missed; one seen twice is
dropped by its id. The cursor names the last record given: the next page
starts strictly after it (``asc``) or before it (``desc``), so records that
arrive meanwhile (always newer, their ids larger) are neither skipped nor
repeated: newest-first paging never reaches them, oldest-first paging reaches
them at its end.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import redis as redis_lib

from sandgrid.audit import MAX_AUDIT_LIMIT, MAX_AUDIT_SINCE, AuditOrder, AuditPage, AuditRecord
from sandgrid.errors import InvalidInput
from sandgrid.wire import names
from sandgrid.wire.objects import ObjectStore
from sandgrid.wire.objects.keys import audit_prefix

__all__ = [
    "AuditQuery",
    "check_query",
    "decode_cursor",
    "encode_cursor",
    "id_key",
    "read_page",
]

#: Stream entries read per round while looking for records that match the filters.
_STREAM_BATCH = 500

_IdKey = tuple[int, int]


def id_key(entry_id: str) -> _IdKey:
    """A record id (``<ms>-<seq>``) as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


@dataclass(frozen=True)
class AuditQuery:
    """What a caller asks for: the tenant's records that match, in ``order``, after a cursor.

    Attributes:
        after: the id of the last record of the previous page (None: the first page).
    """

    tenant: str
    session: str | None = None
    action: str | None = None
    since: float | None = None
    order: AuditOrder = "desc"
    limit: int = 1000
    after: str | None = None

    def fingerprint(self) -> str:
        """The filters a cursor was made for (a cursor holds for those only)."""
        text = json.dumps([self.session, self.action, self.since, self.order])
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def matches(self, rec: AuditRecord) -> bool:
        return (self.session is None or rec.session == self.session) and (
            self.action is None or rec.action == self.action
        )

    def in_range(self, entry_id: str) -> bool:
        """Beyond the cursor in the page's direction, and from ``since`` on."""
        key = id_key(entry_id)
        if self.since is not None and key < (int(self.since * 1000), 0):
            return False
        if self.after is None:
            return True
        return key > id_key(self.after) if self.order == "asc" else key < id_key(self.after)


def encode_cursor(query: AuditQuery, last_id: str) -> str:
    """The opaque cursor of the page after the one that ended at ``last_id``."""
    body = json.dumps({"id": last_id, "o": query.order, "f": query.fingerprint()})
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, query: AuditQuery) -> AuditQuery:
    """``query`` continued after ``cursor``; its order is the cursor's.

    Raises:
        InvalidInput: not a cursor of this API, or one made for other filters
            (``field: cursor``), or for the other order (``field: order``).
    """
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        last, order, made_for = str(body["id"]), body["o"], body["f"]
        id_key(last)
        if order not in ("asc", "desc"):
            raise ValueError(order)
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _bad("cursor", "a next_cursor of an earlier page, unchanged") from None
    if made_for != replace(query, order=order).fingerprint():
        raise _bad("cursor", "the same session, action and since as the page it came from")
    return replace(query, order=order, after=last)


def check_query(query: AuditQuery) -> None:
    """Refuse a limit or a ``since`` out of range.

    Raises:
        InvalidInput: naming ``limit`` or ``since`` and its rule.
    """
    if not 1 <= query.limit <= MAX_AUDIT_LIMIT:
        raise _bad("limit", f"1..{MAX_AUDIT_LIMIT}", f"limit = {query.limit}")
    if query.since is not None and not 0 <= query.since <= MAX_AUDIT_SINCE:
        raise _bad("since", f"0..{MAX_AUDIT_SINCE:.0f} (epoch seconds)", f"since = {query.since}")


def read_page(
    client: redis_lib.Redis[str],
    objects: ObjectStore,
    query: AuditQuery,
    parse: Callable[[str, dict[str, str]], AuditRecord | None],
) -> AuditPage:
    """One page of ``query``: the stream first, then the store (see the module doc).

    Raises:
        InvalidInput: a limit or ``since`` out of range.
        redis.RedisError, the object store's errors: the trail could not be read.
    """
    check_query(query)
    need = query.limit + 1
    found: dict[str, AuditRecord] = {}
    for rec in _from_stream(client, query, need, parse):
        found[rec.id] = rec
    if _store_needed(client, query, len(found) < need):
        for rec in list(_from_store(objects, query, need, found)):
            found[rec.id] = rec
    ordered = sorted(found.values(), key=lambda r: id_key(r.id), reverse=query.order == "desc")
    page, more = ordered[: query.limit], len(ordered) > query.limit
    cursor = encode_cursor(query, page[-1].id) if more else None
    return AuditPage(records=page, more=more, order=query.order, next_cursor=cursor)


def _store_needed(client: redis_lib.Redis[str], query: AuditQuery, short: bool) -> bool:
    """Whether the store may hold records of the page. Newest first: only when the
    stream had too few (``short``). Oldest first: unless the stream still begins at
    or before the cursor, read after the stream (its head only moves forward, so
    every record after the cursor was in the stream when it was read)."""
    if query.order == "desc":
        return short
    if query.after is None:
        return True
    head = client.xrange(names.audit_key(query.tenant), count=1)
    return not head or id_key(head[0][0]) > id_key(query.after)


def _from_stream(
    client: redis_lib.Redis[str],
    query: AuditQuery,
    need: int,
    parse: Callable[[str, dict[str, str]], AuditRecord | None],
) -> Iterator[AuditRecord]:
    """Up to ``need`` matching records of the stream, in the query's order."""
    key, given = names.audit_key(query.tenant), 0
    low = f"{int(query.since * 1000)}-0" if query.since else "-"
    desc = query.order == "desc"
    start = f"({query.after}" if query.after else ("+" if desc else low)
    while given < need:
        if desc:
            entries = client.xrevrange(key, max=start, min=low, count=_STREAM_BATCH)
        else:
            entries = client.xrange(key, min=start, max="+", count=_STREAM_BATCH)
        for entry_id, fields in entries:
            rec = parse(entry_id, fields)
            if rec is not None and query.in_range(rec.id) and query.matches(rec):
                given += 1
                yield rec
                if given >= need:
                    return
        if len(entries) < _STREAM_BATCH:
            return
        start = f"({entries[-1][0]}"


def _from_store(
    objects: ObjectStore, query: AuditQuery, need: int, seen: dict[str, AuditRecord]
) -> Iterator[AuditRecord]:
    """Matching records of the exported segments not ``seen``, in the query's order,
    until ``need`` that come first (segments hold disjoint id ranges, in the order of
    their names; newest first, the ``seen`` stream records come before them)."""
    given = len(seen) if query.order == "desc" else 0
    for key in _segments(objects, query):
        lines = objects.get(key).decode().splitlines()
        recs = [r for r in map(_line_record, lines) if r is not None]
        recs.sort(key=lambda r: id_key(r.id), reverse=query.order == "desc")
        for rec in recs:
            if rec.id not in seen and query.in_range(rec.id) and query.matches(rec):
                given += 1
                yield rec
        if given >= need:
            return


def _segments(objects: ObjectStore, query: AuditQuery) -> list[str]:
    """The segment keys that may hold records of the query's range, in its order.

    Segment ``i`` holds ids from its first one to the next segment's first one.
    """
    firsts: list[tuple[_IdKey, str]] = []
    for key in objects.list(audit_prefix(query.tenant)):
        try:
            firsts.append((id_key(key.rsplit("/", 1)[-1].removesuffix(".jsonl")), key))
        except ValueError:
            continue
    firsts.sort()
    low = (int(query.since * 1000), 0) if query.since else (0, 0)
    after = id_key(query.after) if query.after else None
    if query.order == "desc":
        kept = [(f, k) for f, k in firsts if after is None or f < after]
        oldest = max((i for i, (f, _) in enumerate(kept) if f <= low), default=0)
        return [k for _, k in reversed(kept[oldest:])]
    start = max(low, after) if after is not None else low
    holding = max((i for i, (f, _) in enumerate(firsts) if f <= start), default=0)
    return [k for _, k in firsts[holding:]]


def _line_record(line: str) -> AuditRecord | None:
    """A segment's line as a record; None for a blank or a kept unreadable one."""
    try:
        return AuditRecord.model_validate_json(line) if line.strip() else None
    except ValueError:
        return None


def _bad(field: str, rule: str, what: str | None = None) -> InvalidInput:
    message = f"{what} must be {rule}" if what else f"{field}: must be {rule}"
    return InvalidInput(message, operation="audit", context={"field": field, "rule": rule})
