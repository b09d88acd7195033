"""Pages of the audit trail on real Redis and the local store: order, cursor, filters (23.15)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from sandgrid.errors import InvalidInput
from sandgrid.wire import names
from sandgrid.wire.objects.local import LocalObjects
from scheduler.audit.export import AuditExporter
from scheduler.audit.log import AuditLog
from scheduler.audit.query import AuditQuery, decode_cursor, encode_cursor


@pytest.fixture
def log(redis_client: redis.Redis[str], tmp_path: Path) -> AuditLog:
    return AuditLog(redis_client, LocalObjects(tmp_path), command_chars=5)


def _fill(log: AuditLog, n: int, tenant: str = "acme", session: str = "s-1") -> list[str]:
    return [log.record(tenant, session, "exec", turn=f"t-{i}") for i in range(n)]


def _all(log: AuditLog, **kw: object) -> list[str]:
    """Every record id, page after page, following the cursor."""
    seen, cursor = [], None
    while True:
        page = log.query("acme", cursor=cursor, **kw)  # type: ignore[arg-type]
        seen += [r.id for r in page.records]
        if page.next_cursor is None:
            assert not page.more
            return seen
        assert page.more and len(page.records) == kw.get("limit", 1000)
        cursor = page.next_cursor


def test_the_newest_come_first_by_default(log: AuditLog) -> None:
    ids = _fill(log, 5)
    page = log.query("acme", limit=2)
    assert [r.id for r in page.records] == ids[:-3:-1] and page.more and page.order == "desc"
    oldest = log.query("acme", limit=2, order="asc")
    assert [r.id for r in oldest.records] == ids[:2] and oldest.order == "asc"


def test_the_cursor_pages_without_gaps_or_repeats_in_both_orders(log: AuditLog) -> None:
    ids = _fill(log, 23)
    assert _all(log, limit=5) == ids[::-1]
    assert _all(log, limit=5, order="asc") == ids
    assert _all(log, limit=23) == ids[::-1]  # exactly one page: no cursor


def test_records_arriving_while_paging_are_neither_skipped_nor_repeated(log: AuditLog) -> None:
    ids = _fill(log, 10)
    page = log.query("acme", limit=4)
    late = _fill(log, 3)  # newer than every record of the first page
    rest = []
    cursor = page.next_cursor
    while cursor is not None:
        nxt = log.query("acme", limit=4, cursor=cursor)
        rest += [r.id for r in nxt.records]
        late += _fill(log, 1)
        cursor = nxt.next_cursor
    assert [r.id for r in page.records] + rest == ids[::-1]  # newest first ends at the oldest
    asc = log.query("acme", limit=6, order="asc")
    added = _fill(log, 2)
    second = log.query("acme", limit=100, cursor=asc.next_cursor)
    got = [r.id for r in asc.records] + [r.id for r in second.records]
    assert got == ids + late + added  # oldest first reaches the new ones at its end


def test_paging_spans_the_store_and_the_stream_while_the_exporter_moves_records(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=0)
    ids = _fill(log, 7)
    exporter.export(now=time.time() + 1)  # 7 in the store, in one segment
    ids += _fill(log, 6)
    exporter.export(now=time.time() + 1)  # a second segment
    ids += _fill(log, 5)  # and 5 in the stream
    assert _all(log, limit=4) == ids[::-1]
    assert _all(log, limit=4, order="asc") == ids
    first = log.query("acme", limit=8)  # 5 from the stream, 3 from the store
    exporter.export(now=time.time() + 1)  # the rest moves between two pages
    rest = log.query("acme", limit=100, cursor=first.next_cursor)
    assert [r.id for r in first.records + rest.records] == ids[::-1]
    assert redis_client.xlen(names.audit_key("acme")) == 0


def test_a_record_in_both_places_is_given_once(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    ids = _fill(log, 6)
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=0)
    real_xtrim = redis_client.xtrim
    redis_client.xtrim = lambda *a, **k: 0  # type: ignore[method-assign]
    try:
        exporter.export(now=time.time() + 1)  # exported, not trimmed
    finally:
        redis_client.xtrim = real_xtrim  # type: ignore[method-assign]
    assert _all(log, limit=4) == ids[::-1]
    assert _all(log, limit=4, order="asc") == ids


def test_filters_hold_on_every_page(log: AuditLog) -> None:
    mine = []
    for i in range(12):
        mine.append(log.record("acme", "s-1", "exec"))
        log.record("acme", "s-2", "write")
        if i % 3 == 0:
            log.record("acme", "s-1", "write")
        log.record("globex", "s-1", "exec")
    assert _all(log, limit=5, session="s-1", action="exec") == mine[::-1]
    assert len(_all(log, limit=3, action="write")) == 12 + 4
    since = log.query("acme", order="asc", limit=1).records[0].ts
    assert len(_all(log, limit=7, since=since)) == 12 * 2 + 4
    assert _all(log, since=time.time() + 60) == []


def test_a_cursor_holds_for_its_own_filters_and_order_only(log: AuditLog) -> None:
    _fill(log, 4)
    cursor = log.query("acme", limit=2, session="s-1").next_cursor
    assert cursor is not None
    for kw in ({"session": "s-2"}, {"action": "write"}, {"since": 5.0}):
        with pytest.raises(InvalidInput) as err:
            log.query("acme", limit=2, cursor=cursor, **kw)  # type: ignore[arg-type]
        assert err.value.context["field"] == "cursor"
    with pytest.raises(InvalidInput) as err:
        log.query("acme", limit=2, session="s-1", cursor=cursor, order="asc")
    assert err.value.context["field"] == "order"
    for junk in ("nope", "e30", encode_cursor(AuditQuery("acme"), "x-y")):
        with pytest.raises(InvalidInput) as err:
            log.query("acme", cursor=junk)
        assert err.value.context["field"] == "cursor"


def test_a_cursor_carries_its_order_and_last_id() -> None:
    query = AuditQuery("acme", session="s-1", order="asc", limit=3)
    cursor = encode_cursor(query, "1700000000000-4")
    assert "1700000000000" not in cursor  # opaque to the caller, not a number to edit
    back = decode_cursor(cursor, AuditQuery("acme", session="s-1", limit=9))
    assert back.after == "1700000000000-4" and back.order == "asc" and back.limit == 9


def test_since_holds_across_segments_in_both_orders(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=0)
    ids: list[str] = []
    for _ in range(3):  # three segments, then some in the stream
        ids += _fill(log, 4)
        time.sleep(0.01)
        exporter.export(now=time.time() + 1)
    ids += _fill(log, 2)
    since = int(ids[5].split("-")[0]) / 1000  # within the second segment
    want = [i for i in ids if int(i.split("-")[0]) >= int(since * 1000)]
    assert 0 < len(want) < len(ids)
    assert _all(log, limit=3, since=since) == want[::-1]
    assert _all(log, limit=3, since=since, order="asc") == want
