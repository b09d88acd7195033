"""The egress proxy's decisions moved into the audit trail, once each (23.14), on real Redis."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.models import NetworkAttempt
from sandgrid.wire import names
from sandgrid.wire.objects.local import LocalObjects
from scheduler.audit.export import AuditExporter
from scheduler.audit.log import AuditLog
from scheduler.audit.network import NetworkCollector, network_record
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded


@pytest.fixture
def log(redis_client: redis.Redis[str], tmp_path: Path) -> AuditLog:
    return AuditLog(redis_client, LocalObjects(tmp_path), command_chars=5)


def _own(client: redis.Redis[str], sid: str, tenant: str = "acme", open_: bool = True) -> None:
    client.hset(names.session_key(sid), "tenant", json.dumps(tenant))
    if open_:
        client.sadd(names.tenant_sessions_key(tenant), sid)


def _attempt(client: redis.Redis[str], sid: str, port: int, maxlen: int = 1000, **kw: Any) -> None:
    """One attempt as the worker's ``RedisBook.record`` writes it."""
    body = NetworkAttempt(
        ts=1.5, host="h.test", port=port, allowed=port % 2 == 0, rule="r", node="w1"
    ).model_dump(mode="json")
    client.xadd(
        names.egress_audit_key(sid),
        {"a": json.dumps({**body, **kw})},
        maxlen=maxlen,
        approximate=False,
    )


def _network(log: AuditLog, tenant: str = "acme") -> list[Any]:
    return [r for r in log.query(tenant, order="asc").records if r.action == "network"]


def test_each_attempt_becomes_one_record_allowed_or_refused(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    _own(redis_client, "s-1")
    _attempt(redis_client, "s-1", 80, sent=10, received=32)
    _attempt(redis_client, "s-1", 81, reason="no network policy")
    first = _network(log)
    assert [(r.detail["port"], r.outcome, r.detail["allowed"]) for r in first] == [
        (80, "ok", True),
        (81, "refused", False),
    ]
    assert first[0].bytes == 42 and first[0].node == "w1" and first[0].detail["attempt_ts"] == 1.5
    assert first[1].detail["reason"] == "no network policy" and first[1].session == "s-1"
    _attempt(redis_client, "s-1", 82)
    assert [r.detail["port"] for r in _network(log)] == [80, 81, 82]  # read again: no repeats


def test_the_lookup_field_is_kept_when_the_proxy_reports_it() -> None:
    with_it = network_record(
        "acme", "s-1", {"host": "a", "port": 1, "allowed": False, "lookup": False}
    )
    assert with_it.detail["lookup"] is False
    without = network_record("acme", "s-1", {"host": "a", "port": 1, "allowed": True, "new": [1]})
    assert "lookup" not in without.detail and "new" not in without.detail


def test_attempts_go_to_their_own_tenant_only(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    _own(redis_client, "s-a", "acme")
    _own(redis_client, "s-g", "globex")
    _attempt(redis_client, "s-a", 80)
    _attempt(redis_client, "s-g", 90)
    assert [r.detail["port"] for r in log.query("acme", session="s-g").records] == []
    assert [r.detail["port"] for r in _network(log, "acme")] == [80]
    assert log.network.collect("s-g", tenant="acme") == 0  # never under another tenant's name
    assert [r.detail["port"] for r in _network(log, "globex")] == [90]


def test_a_turn_a_close_and_the_export_sweep_collect_too(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    _own(redis_client, "s-1")
    _attempt(redis_client, "s-1", 80)
    log.collect_network("s-1", "acme")  # as at a turn's end
    _attempt(redis_client, "s-1", 82)
    log.event("acme", "s-1", "session_close")  # a close collects first
    redis_client.srem(names.tenant_sessions_key("acme"), "s-1")
    _attempt(redis_client, "s-1", 84)  # a connection that ended after the close
    exporter = AuditExporter(redis_client, log.objects, interval_s=1, keep_s=3600)
    exporter.export()
    actions = [(r.action, r.detail.get("port")) for r in log.query("acme", order="asc").records]
    assert actions == [("network", 80), ("network", 82), ("session_close", None), ("network", 84)]


def test_two_collectors_at_once_move_each_attempt_once(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    _own(redis_client, "s-1")
    for port in range(0, 1200, 2):
        _attempt(redis_client, "s-1", port)
    collectors = [NetworkCollector(redis_client) for _ in range(4)]
    threads = [threading.Thread(target=c.collect, args=("s-1",)) for c in collectors]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ports = [r.detail["port"] for r in _network(log)]
    assert ports == list(range(0, 1200, 2))


def test_attempts_trimmed_before_collection_are_flagged(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    _own(redis_client, "s-1")
    _attempt(redis_client, "s-1", 1, maxlen=3)
    assert [r.detail.get("dropped_before") for r in _network(log)] == [None]
    for port in range(2, 8):  # 6 more; the proxy keeps 3
        _attempt(redis_client, "s-1", port, maxlen=3)
    recs = _network(log)
    assert [r.detail["port"] for r in recs] == [1, 5, 6, 7]
    assert [r.detail.get("dropped_before") for r in recs] == [None, True, None, None]
    _attempt(redis_client, "s-1", 8, maxlen=3)
    assert _network(log)[-1].detail.get("dropped_before") is None


def test_an_unknown_session_is_left_alone(log: AuditLog, redis_client: redis.Redis[str]) -> None:
    _attempt(redis_client, "s-gone", 80)  # no record: whose it is cannot be told
    assert log.network.sweep() == 0
    assert redis_client.exists(names.audit_network_cursor_key("s-gone")) == 0


def test_the_cursor_outlives_the_stream_it_follows(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    _own(redis_client, "s-1")
    _attempt(redis_client, "s-1", 80)
    log.network.collect("s-1")
    cursor = names.audit_network_cursor_key("s-1")
    assert redis_client.ttl(cursor) > 29 * 86400  # the default: 30 days
    redis_client.expire(names.egress_audit_key("s-1"), 90 * 86400)  # an operator's longer TTL
    _attempt(redis_client, "s-1", 82)
    log.network.collect("s-1")
    assert redis_client.ttl(cursor) > 90 * 86400


def test_a_turns_look_after_the_first_reads_the_streams_end_only(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    """Issue 22.1: the cursor's HGET went with every turn's look; once this process has
    seen the stream end at an attempt moved (or empty), the end alone tells."""
    _own(redis_client, "s-1")
    _own(redis_client, "s-2")
    _attempt(redis_client, "s-1", 80)
    log.collect_network("s-1", "acme")  # moved
    log.collect_network("s-1", "acme")  # nothing new: the end noted
    log.collect_network("s-2", "acme")  # no stream: noted empty
    for sid in ("s-1", "s-2"):
        with recorded(TEST_REDIS_URL) as seen:
            log.collect_network(sid, "acme")
        assert names_of(seen) == ["XREVRANGE"], sid
    assert [r.detail["port"] for r in _network(log)] == [80]


def test_attempts_after_a_noted_end_are_collected_whoever_moved_the_others(
    log: AuditLog, redis_client: redis.Redis[str]
) -> None:
    """The noted end only says nothing came after it: a new attempt is moved by the
    next look, and one another process moved meanwhile is not moved twice."""
    _own(redis_client, "s-1")
    log.collect_network("s-1", "acme")  # noted empty
    _attempt(redis_client, "s-1", 80)
    log.collect_network("s-1", "acme")
    _attempt(redis_client, "s-1", 82)
    assert NetworkCollector(redis_client).collect("s-1") == 1  # another API process
    log.collect_network("s-1", "acme")  # its note (80) is stale: the cursor is read
    _attempt(redis_client, "s-1", 84)
    log.collect_network("s-1", "acme")
    assert [r.detail["port"] for r in _network(log)] == [80, 82, 84]
