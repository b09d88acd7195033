"""The Celery consumer's queues, changed while it runs (a type added or removed, 25.1).

The worker starts consuming the queues of the types it serves then
(``--queues``); afterwards ``consume`` and ``cancel`` change them through the
consumer's own API, run on the consumer's thread (``Consumer.call_soon``, what
Celery's ``add_consumer`` and ``cancel_consumer`` control commands do, without
their round trip through the broker). Changes asked for before the consumer is
ready (``attach``, on ``worker_ready``) wait for it; those that it already has
are dropped, so the queues end as asked.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["QueueControl"]

log = logging.getLogger(__name__)


class QueueControl:
    """Start and stop consuming queues at runtime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._pending: list[tuple[str, str]] = []

    def attach(self, consumer: Any) -> None:
        """The consumer is ready (``celery.signals.worker_ready``'s sender): apply what waited."""
        with self._lock:
            self._consumer = consumer
            pending, self._pending = self._pending, []
        for action, queue in pending:
            self._apply(action, queue)

    def consume(self, queues: list[str]) -> None:
        """Start consuming ``queues`` (no-op for those already consumed)."""
        for queue in queues:
            self._ask("add", queue)

    def cancel(self, queues: list[str]) -> None:
        """Stop consuming ``queues``; a message being run finishes."""
        for queue in queues:
            self._ask("cancel", queue)

    def _ask(self, action: str, queue: str) -> None:
        with self._lock:
            if self._consumer is None:
                self._pending.append((action, queue))
                return
        self._apply(action, queue)

    def _apply(self, action: str, queue: str) -> None:
        consumer = self._consumer
        if action == "add":
            consumer.call_soon(consumer.add_task_queue, queue)
        else:
            consumer.call_soon(consumer.cancel_task_queue, queue)
        log.info("queues: %s %s", "consuming" if action == "add" else "cancelled", queue)
