"""A broker failure after the task message went out is not "the turn did not run".

Celery publishes a turn's task message, then its ``task-sent`` event. When the
broker fails between the two (the Sentinel failover chaos test hit it, 22.5),
``send_task`` raises although a worker will run the turn: the error must say
``turn_sent: true`` and nothing about running, so that the idempotency key is
kept and a retry waits for that turn instead of answering ``session_busy``.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from kombu import Producer

from sandgrid.errors import ErrorCode, SandgridError
from sandgrid.models import ExecRequest, Quotas, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.jobs import TurnJob
from sandgrid.wire.settings import Settings
from scheduler.turns.dispatch import CeleryDispatcher
from scheduler.turns.sent_events import SentEvents
from tests.conftest import TEST_REDIS_URL

NOW = datetime.now(UTC)
SESSION = SessionInfo(
    id="s-" + "d" * 20, tenant="acme", type="python", quotas=Quotas(), created_at=NOW, last_used=NOW
)


def _job() -> TurnJob:
    op = ExecOp(request=ExecRequest(argv=["true"]))
    return TurnJob(turn_id=f"t-{uuid.uuid4().hex}", session=SESSION, op=op)


def _send(redis_client: redis.Redis[str]) -> tuple[SandgridError, int]:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    queue = names.node_queue(f"dispatch-sent-{uuid.uuid4().hex[:8]}")
    with pytest.raises(SandgridError) as caught:
        CeleryDispatcher(app).send(_job(), queue, expires=30)
    depth = redis_client.llen(queue)
    redis_client.delete(queue)
    return caught.value, depth


def _down(*_: Any, **__: Any) -> None:
    raise redis.ConnectionError("primary gone")


def test_a_failure_after_the_message_went_out_says_it_was_sent(
    redis_client: redis.Redis[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the task-sent event, handed over next (kept for its window: sent_events, 22.1)
    monkeypatch.setattr(SentEvents, "publish", _down)
    error, depth = _send(redis_client)
    assert depth == 1  # a worker would run it
    assert error.code == ErrorCode.REGISTRY_UNAVAILABLE
    assert (error.context["turn_sent"], "ran" in error.context) == (True, False)
    assert error.retryable


def test_a_failure_before_the_message_went_out_still_says_it_did_not_run(
    redis_client: redis.Redis[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Producer, "publish", _down)
    error, depth = _send(redis_client)
    assert (depth, error.context["turn_sent"], error.context["ran"]) == (0, False, False)
