"""The result backend: a result stored in two commands, on its sender's channel, and still
delivered (issue 22.1)."""

from __future__ import annotations

import contextlib
from typing import Any

import redis
from celery import Celery, states
from celery.app.task import Context
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult

from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.results import ResultBackend
from sandgrid.wire.settings import Settings
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded


def test_the_app_uses_it_and_keeps_the_redis_url() -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    assert isinstance(app.backend, ResultBackend)
    assert str(app.conf.result_backend).startswith("redis://")


def test_a_result_is_stored_with_set_and_publish_only(redis_client: redis.Redis[str]) -> None:
    """Celery's backend sent GET, MULTI, SETEX, PUBLISH, EXEC."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    app.backend.store_result("t-1.1", {"ok": True}, states.SUCCESS)  # connections up
    with recorded(TEST_REDIS_URL) as seen:
        app.backend.store_result("t-2.1", {"ok": True}, states.SUCCESS)
    assert names_of(seen) == ["SET", "PUBLISH"]
    assert app.backend.get_task_meta("t-2.1")["result"] == {"ok": True}


def test_a_waiter_subscribed_first_gets_the_published_result(
    redis_client: redis.Redis[str],
) -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    handle = app.AsyncResult("t-3.1")
    app.backend.on_task_call(None, "t-3.1")  # what send_task does: SUBSCRIBE first
    app.backend.store_result("t-3.1", 42, states.SUCCESS)
    assert handle.get(timeout=5) == 42


def _sent(app: Celery, task_id: str) -> AsyncResult[Any]:
    """What ``send_task`` does on the result side: the handle, subscribed first."""
    handle: AsyncResult[Any] = app.AsyncResult(task_id)
    app.backend.on_task_call(None, task_id)
    return handle


def _store(app: Celery, task_id: str, value: object, reply_to: str) -> None:
    """What the worker does: store the result of a task sent with ``reply_to``."""
    app.backend.store_result(task_id, value, states.SUCCESS, request=Context(reply_to=reply_to))


def test_a_threads_results_come_on_one_channel_subscribed_once(
    redis_client: redis.Redis[str],
) -> None:
    """Celery subscribed to each task's channel and unsubscribed after its result: two
    commands per turn. Each result is published before its wait starts, the case of
    a fast worker: it waits in the subscription and is not lost."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    oid = app.thread_oid
    first = _sent(app, "t-0.1")
    _store(app, "t-0.1", 0, oid)
    assert first.get(timeout=5) == 0  # subscribed, connections up
    with recorded(TEST_REDIS_URL) as seen:
        for i in range(1, 4):
            handle = _sent(app, f"t-{i}.1")
            _store(app, f"t-{i}.1", i, oid)
            assert handle.get(timeout=5) == i
    assert "SUBSCRIBE" not in names_of(seen) and "UNSUBSCRIBE" not in names_of(seen)
    channels = {args.split()[0].strip('"') for src, name, args in seen if name == "PUBLISH"}
    assert channels == {names.reply_channel(oid)}


def test_a_task_sent_elsewhere_is_read_from_its_key(redis_client: redis.Redis[str]) -> None:
    """An idempotent retry waits on a turn another process sent: its result went to the
    sender's channel, and the wait reads the key when it starts."""
    sender, retry = (make_celery(Settings(redis_url=TEST_REDIS_URL)) for _ in range(2))
    _sent(sender, "t-9.1")
    _store(sender, "t-9.1", 9, sender.thread_oid)
    assert retry.AsyncResult("t-9.1").get(timeout=5) == 9


def test_a_result_missed_while_the_subscription_was_down_is_read_on_reconnect(
    redis_client: redis.Redis[str],
) -> None:
    """The reply channel is no task's key, so Celery's reconnect (which reads the
    subscribed keys) would not find it: the consumer reads each waited task's key."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    handle = _sent(app, "t-5.1")
    with contextlib.suppress(CeleryTimeout):
        handle.get(timeout=0.05)  # waited for, nothing yet
    _store(app, "t-5.1", 5, "another-channel")  # published where no one listens
    backend: Any = app.backend
    backend.result_consumer._reconnect_pubsub()
    assert handle.get(timeout=5) == 5


def test_a_task_sent_without_reply_to_is_published_on_its_key(
    redis_client: redis.Redis[str],
) -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    app.backend.store_result("t-6.1", 6, states.SUCCESS)  # connections up
    with recorded(TEST_REDIS_URL) as seen:
        app.backend.store_result("t-6.1", 6, states.SUCCESS, request=Context())
    published = [args for _, name, args in seen if name == "PUBLISH"]
    assert len(published) == 1 and published[0].startswith("celery-task-meta-t-6.1 ")
