"""The API's ``task-sent`` events, published together every ``EVENT_FLUSH_S`` (issue 22.1).

Celery publishes a ``task-sent`` event (``task_send_sent_event``) with every task
message it sends, so that Flower shows a turn from the moment it is queued,
before any worker has received it: one ``PUBLISH`` per turn beside the
message's ``LPUSH``. ``SentEvents`` takes the place of the app's event dispatcher
for those events (``install``): each event is stamped as Celery stamps it (the
app's logical clock, host, pid, time) when the task is sent, kept, and the
events of each ``EVENT_FLUSH_S`` window go out as one ``task.multi`` message, the
form the workers' buffered events take (``sandgrid.wire.task_events``), which
Flower reads event by event. Flower still sees every queued turn, at most
``EVENT_FLUSH_S`` later; the events kept when the API process stops are lost,
as a worker's are.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery

from sandgrid.wire.task_events import EVENT_FLUSH_S

__all__ = ["SentEvents", "install"]

log = logging.getLogger(__name__)


class SentEvents:
    """Keeps ``task-sent`` events and publishes them once per ``flush_s``.

    Args:
        app: the API's Celery app (its event dispatcher stamps and publishes).
        flush_s: the longest an event waits.
    """

    def __init__(self, app: Celery, flush_s: float = EVENT_FLUSH_S) -> None:
        self.app = app
        self.flush_s = flush_s
        self.dispatcher: Any = app.events.Dispatcher(enabled=False)
        self._events: list[Any] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def publish(self, type: str, fields: dict[str, Any], producer: Any, **_: Any) -> None:
        """What Celery's ``send_task`` calls for its ``task-sent`` event: stamp it
        now, publish it with the others of its window."""
        event = self.dispatcher._prepare_event(type, fields)
        with self._lock:
            self._events.append(event)
            if self._timer is None or not self._timer.is_alive():  # none, or lost in a fork
                self._timer = threading.Timer(self.flush_s, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> int:
        """Publish the kept events as one ``task.multi`` message; how many."""
        with self._lock:
            batch, self._events, self._timer = self._events, [], None
        if not batch:
            return 0
        try:
            with self.app.producer_or_acquire() as producer:
                self.dispatcher._publish(batch, producer, "task.multi")
        except Exception:  # events are for monitoring: a turn never fails on them
            log.warning("task-sent events not published (%d lost)", len(batch), exc_info=True)
        return len(batch)


def install(app: Celery, flush_s: float = EVENT_FLUSH_S) -> SentEvents:
    """Make ``app`` send its ``task-sent`` events through a ``SentEvents`` (once)."""
    amqp: Any = app.amqp
    current = amqp.__dict__.get("_event_dispatcher")
    if isinstance(current, SentEvents):
        return current
    events = SentEvents(app, flush_s)
    amqp.__dict__["_event_dispatcher"] = events  # Celery's cached_property
    amqp.__dict__.pop("send_task_message", None)  # built with the dispatcher it had
    return events
