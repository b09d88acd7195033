"""The Redis commands of a turn's registry scripts, and what their cuts keep (issue 22.1).

A turn's record was read five times and written four in scripts, and its
admission ran 17 commands. These budgets hold the cuts: admission of a turn
that finds its session free, a worker's hold and claim, the session record of a
finished turn, and the end of a turn in a slot; the tests beside them show that
a stale slot still frees its place at the limit and that a set's TTL is never
shortened by a shorter turn.
"""

from __future__ import annotations

import time

import pytest
import redis

from sandgrid.errors import NotFound
from sandgrid.models import SessionCreate
from sandgrid.wire import names
from sandgrid.wire.ledger import Claim
from sandgrid.wire.redis_ledger import RedisLedger
from scheduler.registry.sessions import SessionRegistry
from scheduler.registry.turns import TENANT_SLOTS_BUCKET_S
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded


def _admit(
    reg: SessionRegistry, sid: str, turn: str, ttl: float = 30, parallel: int = 2, limit: int = 4
) -> str:
    return reg.admit_turn("node.w1", 10, "acme", limit, sid, turn, ttl, parallel=parallel)[0]


def test_admitting_a_turn_on_a_free_session_runs_eight_commands(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    assert _admit(reg, "s-0", "t-0") == "ok"  # the script loaded
    with recorded(TEST_REDIS_URL) as seen:
        assert _admit(reg, "s-1", "t-1") == "ok"
    assert names_of(seen, "rt") == ["EVALSHA"]
    assert len(names_of(seen, "lua")) == 8, names_of(seen, "lua")
    with recorded(TEST_REDIS_URL) as seen:  # the queue known shallow: no LLEN
        found = reg.admit_turn("node.w1", 10, "acme", 4, "s-2", "t-2", 30, check_depth=False)
    assert found[0] == "ok" and "LLEN" not in names_of(seen, "lua")
    # the session's turns, its alone lock and its waiters in one EXISTS, no ZCARD of them
    assert names_of(seen, "lua")[:3] == ["ZCOUNT", "EXISTS", "ZADD"], names_of(seen, "lua")
    # the tenant's set already lives past this turn's deadline: its ZADD, no TTL
    assert names_of(seen, "lua")[-1] == "ZADD" and "PTTL" not in names_of(seen, "lua")
    assert len(names_of(seen, "lua")) == 7, names_of(seen, "lua")


def test_one_exists_of_a_sessions_turns_still_finds_its_lock_and_its_waiters(
    redis_client: redis.Redis[str],
) -> None:
    """Issue 22.1: the turns in flight are counted only when one of the three keys is
    there, and the count tells whether the others are: a turn beside a running one is
    admitted with one more command (the ZCARD), and waits behind a waiter or the lock."""
    reg = SessionRegistry(redis_client)
    assert _admit(reg, "s-0", "t-0") == "ok"  # the script loaded
    assert _admit(reg, "s-1", "a", parallel=3, limit=9) == "ok"
    with recorded(TEST_REDIS_URL) as seen:
        assert _admit(reg, "s-1", "b", parallel=3, limit=9) == "ok"
    assert names_of(seen, "lua")[:4] == ["LLEN", "ZCOUNT", "EXISTS", "ZCARD"]
    assert len(names_of(seen, "lua")) == 9, names_of(seen, "lua")
    assert _admit(reg, "s-1", "c", parallel=2, limit=9) == "wait"  # both slots taken
    reg.end_turn("s-1", "a")
    assert _admit(reg, "s-1", "d", parallel=2, limit=9) == "wait"  # c waits first
    assert _admit(reg, "s-1", "c", parallel=2, limit=9) == "ok"
    reg.end_turn("s-1", "b")
    reg.end_turn("s-1", "c")
    assert not redis_client.exists(names.session_turns_key("s-1"))
    assert _admit(reg, "s-1", "e", parallel=2, limit=9) == "wait"  # d waits, no turn runs
    reg.withdraw("s-1", "d")
    reg.withdraw("s-1", "e")
    assert not redis_client.exists(names.session_waiting_key("s-1"))
    assert reg.begin_turn("s-1", "pause", 30)
    assert _admit(reg, "s-1", "e", parallel=2, limit=9) == "wait"  # held alone
    reg.end_turn("s-1", "pause")
    assert _admit(reg, "s-1", "e", parallel=2, limit=9) == "ok"


def test_a_hold_and_a_claim_read_and_write_the_record_once_each(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    ledger = RedisLedger(redis_client)
    assert _admit(reg, "s-1", "t-1") == "ok"
    ledger.receive_turn("t-0", "w1", 1, "inc-1")  # the script loaded
    with recorded(TEST_REDIS_URL) as seen:
        assert ledger.receive_turn("t-1", "w1", 1, "inc-1")
        assert ledger.claim_turn("t-1", "w1", 1, "inc-1")
    assert names_of(seen, "lua") == ["HMGET", "HSET", "HMGET", "HSET"]
    record = reg.turn_state("t-1")
    assert record["state"] == "running" and record["runs"] == "1" and record["inc"] == "inc-1"
    assert not ledger.claim_turn("t-1", "w1", 1, "inc-1")  # a redelivery never runs twice
    assert ledger.claim_turn("t-none", "w1", 1, "inc-1")  # no record: nothing to guard
    assert not ledger.receive_turn("t-none", "w1", 1, "inc-1")


def test_a_claim_tells_a_turn_cancelled_before_it_in_the_same_read(
    redis_client: redis.Redis[str],
) -> None:
    """Issue 22.1: the API marks the record (and the flag), so a warm exec's worker
    reads no flag of its own; a turn cancelled before its admission keeps the mark."""
    reg, ledger = SessionRegistry(redis_client), RedisLedger(redis_client)
    assert _admit(reg, "s-1", "t-1") == "ok"
    reg.cancel_turn("t-1", 60)
    assert redis_client.exists(names.turn_cancel_key("t-1"))
    with recorded(TEST_REDIS_URL) as seen:
        assert ledger.claim_turn("t-1", "w1", 1, "inc-1") == Claim.CANCELLED
    assert names_of(seen, "lua") == ["HMGET", "HSET"]
    reg.cancel_turn("t-2", 60)  # named before it was admitted (a streamed exec)
    assert 0 < redis_client.ttl(names.turn_key("t-2")) <= 60
    assert _admit(reg, "s-2", "t-2", ttl=30) == "ok"
    assert redis_client.ttl(names.turn_key("t-2")) > 60  # the record's own TTL now
    assert ledger.claim_turn("t-2", "w1", 1, "inc-1") == Claim.CANCELLED
    assert _admit(reg, "s-3", "t-3") == "ok"
    assert ledger.claim_turn("t-3", "w1", 1, "inc-1") == Claim.CLAIMED
    assert ledger.claim_turn("t-3", "w1", 1, "inc-1") == Claim.REFUSED


def test_a_finished_turns_session_record_is_one_hset(redis_client: redis.Redis[str]) -> None:
    ledger = RedisLedger(redis_client)
    redis_client.hset(names.session_key("s-1"), mapping={"id": '"s-1"', "turns": "0"})
    ledger.record_turn("s-1", snapshot="snap-0", turn_id="t-0")  # the script loaded
    with recorded(TEST_REDIS_URL) as seen:
        ledger.record_turn("s-1", snapshot="snap-1", turn_id="t-1", unsaved=True)
    assert names_of(seen, "lua") == ["HINCRBY", "HSET"]  # the count is the existence check
    stored = redis_client.hgetall(names.session_key("s-1"))
    assert stored["turns"] == "2" and stored["snapshot"] == '"snap-1"'
    assert stored["last_turn"] == '"t-1"' and stored["unsaved"] == "true"


def test_a_turn_never_recreates_a_session_record_that_is_gone(
    redis_client: redis.Redis[str],
) -> None:
    """The count of a gone record answers 1 like a first turn's: the record's id tells
    them apart, and the gone one is deleted again in the same script."""
    ledger = RedisLedger(redis_client)
    with pytest.raises(NotFound):
        ledger.record_turn("s-gone", snapshot="snap-1", turn_id="t-1")
    assert not redis_client.exists(names.session_key("s-gone"))
    with pytest.raises(NotFound):
        ledger.update("s-gone", unsaved=True)  # no count: EXISTS still guards it
    assert not redis_client.exists(names.session_key("s-gone"))
    redis_client.hset(names.session_key("s-new"), mapping={"id": '"s-new"'})
    ledger.record_turn("s-new", snapshot="snap-1", turn_id="t-1")  # a first turn, no count yet
    assert redis_client.hget(names.session_key("s-new"), "turns") == "1"


def test_the_end_of_a_turn_in_a_slot_does_not_read_the_alone_lock(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    assert _admit(reg, "s-1", "t-1") == "ok"
    assert _admit(reg, "s-2", "t-2") == "ok"
    reg.finish_turn("s-1", "t-1", "acme")  # the script loaded
    with recorded(TEST_REDIS_URL) as seen:
        reg.finish_turn("s-2", "t-2", "acme")
    # no GET of the alone lock, no HGET of the record before it is marked done
    assert names_of(seen, "lua") == ["HSET", "ZREM", "ZREM"]
    assert reg.turn_state("t-2")["state"] == "done" and reg.turns_in_flight("acme") == 0


def test_stale_slots_free_their_place_when_they_would_refuse(
    redis_client: redis.Redis[str],
) -> None:
    """Tenant and session slots past their deadline are dropped only when they would
    refuse a turn, as they were dropped before every admission."""
    reg = SessionRegistry(redis_client)
    assert _admit(reg, "s-1", "t-1", ttl=0.05, parallel=1, limit=1) == "ok"
    assert _admit(reg, "s-2", "t-2", parallel=1, limit=1) == "tenant_limit"
    assert _admit(reg, "s-1", "t-3", parallel=1, limit=2) == "wait"
    time.sleep(0.08)
    assert _admit(reg, "s-1", "t-3", parallel=1, limit=1) == "ok"  # both stale ones dropped
    assert reg.session_turns("s-1") == ["t-3"]
    assert 0 < redis_client.pttl(names.session_turns_key("s-1")) <= 30_000
    tenant_ms = redis_client.pttl(names.tenant_turns_key("acme"))  # to its bucket's end
    assert 30_000 - 500 < tenant_ms <= (30 + TENANT_SLOTS_BUCKET_S) * 1000


def test_a_shorter_turn_never_shortens_a_sets_ttl(redis_client: redis.Redis[str]) -> None:
    reg = SessionRegistry(redis_client)
    assert _admit(reg, "s-1", "t-long", ttl=600) == "ok"
    assert _admit(reg, "s-1", "t-short", ttl=5) == "ok"
    assert redis_client.pttl(names.session_turns_key("s-1")) > 500_000
    assert redis_client.pttl(names.tenant_turns_key("acme")) > 500_000
    assert _admit(reg, "s-2", "t-new", ttl=5) == "ok"  # a new set takes its turn's TTL
    assert 0 < redis_client.pttl(names.session_turns_key("s-2")) <= 5_000


def test_a_turns_lookup_reads_the_record_and_its_lease_only(
    redis_client: redis.Redis[str],
) -> None:
    """Two commands, not four: the owner and the record a turn needs; the lease's TTL
    and the busy check stay in the full lookup (``GET /v1/sessions/{id}``)."""
    reg = SessionRegistry(redis_client)
    info = reg.create("acme", SessionCreate(type="python"))
    assert reg.ledger.acquire_lease(info.id, "w1")
    assert _admit(reg, info.id, "t-1") == "ok"
    reg.get("acme", info.id, brief=True)  # connections up
    with recorded(TEST_REDIS_URL) as seen:
        brief = reg.get("acme", info.id, brief=True)
    assert names_of(seen) == ["HGETALL", "GET"]
    full = reg.get("acme", info.id)
    assert brief.owner == full.owner == "w1" and brief.quotas == full.quotas
    assert full.state == "busy" and full.lease_expires is not None
    assert brief.state == "live" and brief.lease_expires is None
    reg.close(info.id)
    assert reg.get("acme", info.id, brief=True).state == "closed"


def test_a_tenants_set_keeps_its_expiry_and_moves_its_ttl_once_a_bucket(
    redis_client: redis.Redis[str],
) -> None:
    """Issue 22.1: the tenant's set outlives its turns (its ``~expiry`` member, scored
    by minus the end of the deadline's bucket): a turn whose bucket is there adds
    itself alone; one beyond it moves the TTL, which never shrinks and always covers
    every turn's deadline. The member is no slot: not counted, never dropped as stale."""
    reg = SessionRegistry(redis_client)
    key = names.tenant_turns_key("acme")
    assert _admit(reg, "s-0", "t-0") == "ok"  # the script loaded, the set made
    reg.finish_turn("s-0", "t-0", "acme")
    assert redis_client.zrange(key, 0, -1) == ["~expiry"]  # no turn, the set stays
    assert reg.turns_in_flight("acme") == 0
    with recorded(TEST_REDIS_URL) as seen:
        assert _admit(reg, "s-1", "t-1") == "ok"
    assert names_of(seen, "lua").count("ZADD") == 2 and "PTTL" not in names_of(seen, "lua")
    with recorded(TEST_REDIS_URL) as seen:  # a deadline past the bucket: the TTL moves
        assert _admit(reg, "s-2", "t-2", ttl=TENANT_SLOTS_BUCKET_S + 60) == "ok"
    assert names_of(seen, "lua")[-2:] == ["PTTL", "PEXPIRE"]
    long_ms = redis_client.pttl(key)
    assert long_ms > (TENANT_SLOTS_BUCKET_S + 60) * 1000 - 500
    assert _admit(reg, "s-3", "t-3", ttl=5) == "ok"  # a shorter turn: never shortened
    assert redis_client.pttl(key) > long_ms - 500
    expires = time.time() + redis_client.pttl(key) / 1000 + 0.5
    assert -float(redis_client.zscore(key, "~expiry") or 0) <= expires
    for turn, deadline in redis_client.zrangebyscore(key, 0, "+inf", withscores=True):
        assert deadline <= expires, turn
    assert reg.turns_in_flight("acme") == 3
    assert _admit(reg, "s-4", "t-4", limit=4) == "ok"  # 4 turns, the limit: no place taken
    assert _admit(reg, "s-5", "t-5", limit=4) == "tenant_limit"
    assert not reg.acquire_turn_slot("acme", "t-6", 4, 30)  # the exclusive ops' slot too
    assert reg.acquire_turn_slot("acme", "t-6", 5, 30)


def test_a_tenants_set_of_a_dead_api_lapses_by_its_bucket(redis_client: redis.Redis[str]) -> None:
    """A turn whose API died is never given back: its slot is dropped when it would
    refuse, as before, and the expiry member is not; the set lapses at its bucket's end."""
    reg = SessionRegistry(redis_client)
    key = names.tenant_turns_key("acme")
    assert _admit(reg, "s-1", "t-1", ttl=0.05, limit=1) == "ok"  # its API dies
    assert 0 < redis_client.pttl(key) <= TENANT_SLOTS_BUCKET_S * 1000 + 1000
    time.sleep(0.08)
    assert _admit(reg, "s-2", "t-2", limit=1) == "ok"  # the stale slot dropped
    assert redis_client.zrange(key, 0, -1) == ["~expiry", "t-2"]  # minus its end: first
    redis_client.zrem(key, "~expiry")  # a set made by the version before: no expiry member
    redis_client.pexpire(key, 900_000)
    assert _admit(reg, "s-3", "t-3", limit=3) == "ok"
    assert redis_client.zscore(key, "~expiry") is not None
    assert redis_client.pttl(key) > 900_000 - 1000  # never shortened
