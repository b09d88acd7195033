"""A worker's task events go out once per EVENT_FLUSH_S, not once per event (issue 22.1)."""

from __future__ import annotations

from typing import Any

from sandgrid.wire import task_events
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from sandgrid.wire.task_events import EVENT_FLUSH_S, REARM_S, Consumer
from tests.conftest import TEST_REDIS_URL


class _Hub:
    def __init__(self) -> None:
        self.soon: list[Any] = []
        self.later: list[tuple[float, Any]] = []

    def call_soon(self, callback: Any) -> None:
        self.soon.append(callback)

    def call_later(self, delay: float, callback: Any) -> None:
        self.later.append((delay, callback))


class _Dispatcher:
    def __init__(self) -> None:
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1


def _consumer() -> tuple[Consumer, _Hub, _Dispatcher]:
    consumer = Consumer.__new__(Consumer)  # no broker: only the flush logic is under test
    hub, dispatcher = _Hub(), _Dispatcher()
    consumer.hub = hub
    consumer.event_dispatcher = dispatcher
    return consumer, hub, dispatcher


def test_the_worker_app_names_it() -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    assert app.conf.worker_consumer == task_events.CONSUMER


def test_the_events_of_a_window_go_out_in_one_flush() -> None:
    """Celery's consumer asked the loop for a flush after every event: a turn's
    received, started and succeeded were three publishes."""
    consumer, hub, dispatcher = _consumer()
    for _ in range(3):  # a turn's three events
        consumer.on_send_event_buffered()
    assert len(hub.soon) == 1 and dispatcher.flushes == 0
    hub.soon.pop()()
    assert [delay for delay, _ in hub.later] == [EVENT_FLUSH_S]
    hub.later.pop()[1]()
    assert dispatcher.flushes == 1


def test_an_event_after_a_flush_arms_the_next() -> None:
    consumer, hub, dispatcher = _consumer()
    consumer.on_send_event_buffered()
    hub.soon.pop()()
    hub.later.pop()[1]()
    consumer.on_send_event_buffered()
    assert len(hub.soon) == 1
    hub.soon.pop()()
    hub.later.pop()[1]()
    assert dispatcher.flushes == 2


def test_without_an_event_loop_nothing_is_scheduled() -> None:
    consumer, _, dispatcher = _consumer()
    consumer.hub = None
    consumer.on_send_event_buffered()
    assert dispatcher.flushes == 0


def test_a_flush_whose_timer_was_dropped_is_armed_again() -> None:
    """A restart of the consumer's loop may drop the armed timer: the next event
    after REARM_S arms a new one instead of waiting for a full buffer."""
    consumer, hub, dispatcher = _consumer()
    consumer.on_send_event_buffered()
    hub.soon.clear()  # the loop restarted: the arming never ran
    consumer.on_send_event_buffered()
    assert hub.soon == []  # within REARM_S: still taken as armed
    consumer._armed_at -= REARM_S
    consumer.on_send_event_buffered()
    assert len(hub.soon) == 1
    hub.soon.pop()()
    hub.later.pop()[1]()
    assert dispatcher.flushes == 1
