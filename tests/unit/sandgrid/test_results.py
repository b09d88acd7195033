"""The result backend: a result stored in two commands, and still delivered (issue 22.1)."""

from __future__ import annotations

import redis
from celery import states

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
