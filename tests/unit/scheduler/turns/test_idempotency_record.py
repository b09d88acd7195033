"""An idempotency key's record as one string (issue 22.1): reserved and read in one
command, kept with one, and what it promised before still holds, on real Redis."""

from __future__ import annotations

import time

import redis

from sandgrid.models import ExecResult
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnOutcome
from scheduler.registry.sessions import SessionRegistry
from scheduler.registry.turns import TURN_RECORD_TTL_S
from scheduler.turns.idempotency import IdempotencyStore, done_record
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded

OUTCOME = TurnOutcome(turn_id="t-k1", node="w1", ok=True, result=ExecResult(exit_code=0))


def test_a_new_key_is_reserved_in_one_command(redis_client: redis.Redis[str]) -> None:
    """It was a script of five (HGET, HSET, PEXPIRE, EXISTS and its EVALSHA), then
    the SET and the turn record's EXISTS."""
    store = IdempotencyStore(redis_client)
    assert store.reserve("t-k0", "fp", 60).state == "new"  # connections up
    with recorded(TEST_REDIS_URL) as seen:
        assert store.reserve("t-k1", "fp", 60).state == "new"
    assert names_of(seen) == ["SET"]
    ttl = redis_client.pttl(names.idempotency_key("t-k1"))
    assert 60_000 < ttl <= (60 + TURN_RECORD_TTL_S) * 1000
    assert store.reserve("t-k1", "fp", 60).state == "pending"  # in flight: wait for it
    assert store.reserve("t-k1", "other", 60).state == "mismatch"


def test_the_turns_end_keeps_the_outcome_in_one_set(redis_client: redis.Redis[str]) -> None:
    reg, store = SessionRegistry(redis_client), IdempotencyStore(redis_client)
    for turn in ("t-k0", "t-k1"):
        assert store.reserve(turn, "fp", 60).state == "new"
        assert reg.admit_turn("q", 10, "acme", 4, f"s-{turn}", turn, 30)[0] == "ok"
    reg.finish_turn("s-t-k0", "t-k0", "acme", settled=done_record("fp", "{}"), keep_s=60)
    with recorded(TEST_REDIS_URL) as seen:
        settled = done_record("fp", OUTCOME.model_dump_json())
        reg.finish_turn("s-t-k1", "t-k1", "acme", settled=settled, keep_s=60)
    assert "HSET" in names_of(seen, "lua") and names_of(seen, "lua").count("SET") == 1
    assert "EXPIRE" not in names_of(seen, "lua")
    found = store.reserve("t-k1", "fp", 60)
    assert found.state == "done" and found.outcome == OUTCOME  # a retry: the first result
    assert store.reserve("t-k1", "other", 60).state == "mismatch"
    assert store.outcome("t-k1") == OUTCOME
    assert 0 < redis_client.ttl(names.idempotency_key("t-k1")) <= 60


def test_a_reservation_outlives_its_turn_record_and_is_then_never_taken_over(
    redis_client: redis.Redis[str],
) -> None:
    """Its API process died after sending: while the turn record is there, so is the
    key (a key that holds nothing has no turn record: ``reserve`` asks no EXISTS),
    and a retry waits for that turn, never takes it over."""
    store = IdempotencyStore(redis_client, take_over_s=0.01)
    assert store.reserve("t-k1", "fp", 35).state == "new"
    assert SessionRegistry(redis_client).admit_turn("q", 10, "acme", 4, "s-1", "t-k1", 30)[0]
    record_ttl = redis_client.pttl(names.turn_key("t-k1"))
    assert redis_client.pttl(names.idempotency_key("t-k1")) > record_ttl > 0
    time.sleep(0.03)
    assert store.reserve("t-k1", "fp", 35).state == "pending"
    assert not store._take_over("t-k1", 35)
    assert redis_client.pttl(names.idempotency_key("t-k1")) > record_ttl


def test_a_reservation_whose_request_died_before_sending_is_taken_over_once(
    redis_client: redis.Redis[str],
) -> None:
    store = IdempotencyStore(redis_client, take_over_s=0.05)
    assert store.reserve("t-k1", "fp", 60).state == "new"
    assert not store._take_over("t-k1", 60)  # too young
    time.sleep(0.08)
    assert store._take_over("t-k1", 60)
    assert not store._take_over("t-k1", 60)  # its time was reset: one caller wins
    assert redis_client.pttl(names.idempotency_key("t-k1")) > TURN_RECORD_TTL_S * 1000
    assert store.reserve("t-k1", "fp", 60).state == "pending"


def test_a_record_of_an_earlier_version_is_still_read_and_never_taken_over(
    redis_client: redis.Redis[str],
) -> None:
    """A hash (fp, state, outcome) left by an API of the version before: read, replayed,
    refused for another body; a pending one lapses with its TTL."""
    store = IdempotencyStore(redis_client, take_over_s=0.0)
    done = {"fp": "fp", "state": "done", "outcome": OUTCOME.model_dump_json()}
    redis_client.hset(names.idempotency_key("t-k1"), mapping=done)
    found = store.reserve("t-k1", "fp", 60)
    assert found.state == "done" and found.outcome == OUTCOME
    assert store.reserve("t-k1", "other", 60).state == "mismatch"
    assert store.outcome("t-k1") == OUTCOME
    pending = {"fp": "fp", "state": "pending", "at": "0"}
    redis_client.hset(names.idempotency_key("t-k2"), mapping=pending)
    assert store.reserve("t-k2", "fp", 60).state == "pending"
    assert not store._take_over("t-k2", 60)
