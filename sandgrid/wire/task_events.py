"""A worker's task events, published together every ``EVENT_FLUSH_S`` (issue 22.1).

Celery's worker buffers task events (``task-received``, ``task-started``,
``task-succeeded``...) and publishes the buffer as one ``task.multi`` message,
but it schedules that flush on the event loop's next turn after each event
(``Consumer.on_send_event_buffered``): a turn's three events went out as three
``PUBLISH``es, a tenth of the Redis commands of a warm turn. ``Consumer`` waits
``EVENT_FLUSH_S`` after the first buffered event instead, so every event of that
window (of all the turns the node ran in it) goes out in one message. Flower
still gets every event, in order, with its own timestamps, at most
``EVENT_FLUSH_S`` later; Celery's own limit (``buffer_limit``, 24 events) still
flushes a full buffer at once. The events buffered when the worker stops are
lost, as Celery's were when the connection was down at its end.

``make_celery`` names it as ``worker_consumer``; the API process never runs it.
"""

from __future__ import annotations

import time
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

__all__ = ["CONSUMER", "EVENT_FLUSH_S", "REARM_S", "Consumer"]

#: The longest a task event waits in the worker's buffer (s).
EVENT_FLUSH_S = 0.1
#: A flush armed this long ago and not run is armed again (s).
REARM_S = 10 * EVENT_FLUSH_S
#: Where Celery finds this consumer (``worker_consumer``).
CONSUMER = "sandgrid.wire.task_events:Consumer"


class Consumer(CeleryConsumer):
    """Celery's worker consumer, flushing task events once per ``EVENT_FLUSH_S``."""

    _flush_due = False
    _armed_at = 0.0

    def on_send_event_buffered(self) -> None:  # type: ignore[override]  # stubs: a promise
        """An event was buffered (from any thread): flush within ``EVENT_FLUSH_S``.

        A flush armed more than ``REARM_S`` ago is armed again: a timer that a
        restart of the consumer's loop dropped must not leave events waiting for
        a full buffer.
        """
        hub: Any = getattr(self, "hub", None)
        if hub is None:
            return
        now = time.monotonic()
        if self._flush_due and now - self._armed_at < REARM_S:
            return
        self._flush_due, self._armed_at = True, now
        hub.call_soon(self._arm_flush)  # the timer is the loop thread's

    def _arm_flush(self) -> None:
        hub: Any = getattr(self, "hub", None)
        hub.call_later(EVENT_FLUSH_S, self._timed_flush)

    def _timed_flush(self) -> None:
        # Cleared first: an event buffered from here on arms the next flush.
        self._flush_due = False
        base: Any = self  # Celery's ``_flush_events``: not in the stubs
        base._flush_events()
