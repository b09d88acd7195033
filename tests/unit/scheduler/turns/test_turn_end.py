"""The end of a turn that answered, in one round trip (``SessionRegistry.finish_turn``)."""

from __future__ import annotations

import redis

from sandgrid.models import ExecResult
from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.jobs import TurnOutcome
from sandgrid.wire.redis_ledger import RedisLedger
from sandgrid.wire.settings import Settings
from scheduler.registry.sessions import SessionRegistry
from scheduler.turns.dispatch import CeleryDispatcher, result_key
from scheduler.turns.idempotency import IdempotencyStore, done_record
from tests.conftest import TEST_REDIS_URL


def test_finish_turn_releases_lock_slot_result_and_keeps_the_outcome(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    assert reg.admit_turn("q", 10, "acme", 2, "s-1", "t-1", 30)[0] == "ok"
    redis_client.set("celery-task-meta-t-1.1", "{}")
    outcome = TurnOutcome(turn_id="t-1", node="w1", ok=True, result=ExecResult(exit_code=0))
    reg.finish_turn(
        "s-1",
        "t-1",
        "acme",
        result_key="celery-task-meta-t-1.1",
        settled=done_record("fp-1", outcome.model_dump_json()),
        keep_s=60,
    )
    assert redis_client.get(names.turnlock_key("s-1")) is None
    assert reg.turn_state("t-1")["state"] == "done"
    assert reg.turns_in_flight("acme") == 0
    assert not redis_client.exists("celery-task-meta-t-1.1")
    assert IdempotencyStore(redis_client).outcome("t-1") == outcome
    assert 0 < redis_client.ttl(names.idempotency_key("t-1")) <= 60


def test_finish_turn_releases_the_lock_of_an_op_that_held_the_session_alone(
    redis_client: redis.Redis[str],
) -> None:
    reg = SessionRegistry(redis_client)
    assert reg.begin_turn("s-1", "t-1", 30)
    reg.finish_turn("s-1", "t-1", "acme", alone=True)
    assert redis_client.get(names.turnlock_key("s-1")) is None
    assert reg.turn_state("t-1")["state"] == "done"


def test_finish_turn_leaves_what_is_not_its_own(redis_client: redis.Redis[str]) -> None:
    """Another turn's lock stays, no outcome is kept without one, and no result key is
    deleted without one. A record marked abandoned (its runner raised; a keyed retry
    that finds the result may still end it) ends done, as final to every reader."""
    reg = SessionRegistry(redis_client)
    assert reg.begin_turn("s-1", "t-other", 30)
    assert reg.admit_turn("q", 10, "acme", 2, "s-2", "t-2", 30)[0] == "ok"
    reg.abandon_turn("t-2")
    reg.finish_turn("s-1", "t-2", "acme", alone=True)
    assert redis_client.get(names.turnlock_key("s-1")) == "t-other"
    assert reg.turn_state("t-2")["state"] == "done"
    assert not RedisLedger(redis_client).claim_turn("t-2", "w1", 1, "inc-1")
    assert not reg.abandon_turn("t-2")
    assert not redis_client.exists(names.idempotency_key("t-2"))
    assert reg.turns_in_flight("acme") == 0


def test_finish_turn_never_recreates_a_turn_record_that_is_gone(
    redis_client: redis.Redis[str],
) -> None:
    """The record is marked done without a read (issue 22.1): one that lapsed, or that a
    failover lost, is not written again (it would have no TTL), and one that holds a
    cancel's mark alone keeps that mark and its TTL."""
    reg = SessionRegistry(redis_client)
    assert reg.admit_turn("q", 10, "acme", 2, "s-1", "t-1", 30)[0] == "ok"
    redis_client.delete(names.turn_key("t-1"))
    reg.finish_turn("s-1", "t-1", "acme")
    assert not redis_client.exists(names.turn_key("t-1"))
    reg.cancel_turn("t-2", 60)  # a record of the mark alone
    reg.finish_turn("s-1", "t-2", "acme")
    assert redis_client.hgetall(names.turn_key("t-2")) == {"cancel": "1"}
    assert 0 < redis_client.ttl(names.turn_key("t-2")) <= 60


def test_result_key_only_for_the_same_database(redis_client: redis.Redis[str]) -> None:
    same = CeleryDispatcher(make_celery(Settings(redis_url=TEST_REDIS_URL)))
    handle = same.app.AsyncResult("t-1.1")
    assert result_key(same, handle, redis_client) == "celery-task-meta-t-1.1"
    other_url = TEST_REDIS_URL.rsplit("/", 1)[0] + "/14"
    other = CeleryDispatcher(make_celery(Settings(redis_url=other_url)))
    assert result_key(other, other.app.AsyncResult("t-1.1"), redis_client) is None
