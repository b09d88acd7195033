"""The API's task-sent events, one PUBLISH per window (issue 22.1), still each one seen
by an event receiver (what Flower runs), on real Redis."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from kombu.exceptions import OperationalError

from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from scheduler.turns import sent_events
from scheduler.turns.dispatch import CeleryDispatcher
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import recorded


def test_a_windows_task_sent_events_go_out_in_one_publish_and_all_arrive(
    redis_client: redis.Redis[str],
) -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    CeleryDispatcher(app)  # installs it
    events = sent_events.install(app)
    events.flush_s = 0.3
    seen: list[dict[str, Any]] = []
    with app.connection_for_read() as conn:
        receiver = app.events.Receiver(conn, handlers={"task-sent": seen.append})
        listening = threading.Thread(target=receiver.capture, kwargs={"wakeup": False}, daemon=True)
        listening.start()
        time.sleep(0.5)  # bound to the events' exchange
        with recorded(TEST_REDIS_URL) as sent:
            ids = [
                app.send_task("sandgrid.nothing", args=[i], queue="sg-test-nobody").id
                for i in range(5)
            ]
            deadline = time.monotonic() + 5
            while len(seen) < 5 and time.monotonic() < deadline:
                time.sleep(0.02)
        receiver.should_stop = True
    publishes = [args for _, name, args in sent if name == "PUBLISH" and "celeryev" in args]
    assert len(publishes) == 1, publishes  # Celery sent one per task
    assert [e["uuid"] for e in seen] == ids  # every one, in order, as Flower reads them
    assert all(e["name"] == "sandgrid.nothing" and e["queue"] == "sg-test-nobody" for e in seen)
    redis_client.delete("sg-test-nobody")


def test_install_is_once_and_a_failed_publish_never_fails_a_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    first = sent_events.install(app)
    assert sent_events.install(app) is first

    def down() -> Any:
        raise OperationalError("Redis is away")

    monkeypatch.setattr(app, "producer_or_acquire", down)
    first.publish("task-sent", {"uuid": "t-1.1"}, None)
    assert first.flush() == 1  # logged, not raised
    assert first.flush() == 0


def test_a_timer_lost_in_a_fork_is_armed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process forked while a flush was armed has the timer's note, not its thread:
    the next event arms a new one instead of waiting forever."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    events = sent_events.SentEvents(app, flush_s=0.01)
    flushed = threading.Event()
    monkeypatch.setattr(events, "flush", lambda: flushed.set() or 0)
    events._timer = threading.Timer(60, lambda: None)  # never started: as after a fork
    events.publish("task-sent", {"uuid": "t-1.1"}, None)
    assert flushed.wait(5)
