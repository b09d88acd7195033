"""Threads kept for the next relayed connection instead of started for each.

A port connection holds two threads for its life, one per direction
(``splice.Link.run_here``), on the worker (its port listener) and in the
sandbox (the agent's ``inbound``). Starting them per connection put thread
starts on each request's path, on the worker the first before the hello was
even read. ``Threads`` runs a task on an idle thread when one waits, else on
a new one: a task never queues behind a busy thread (a long WebSocket holds
its two for hours), so the count follows the connections open at once, and
at most ``keep`` idle threads stay.

Stdlib only: the agent runs it in the sandbox; the worker imports it as it
imports ``splice``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["KEEP_IDLE", "Threads"]

#: Idle threads kept for the next connections (two per connection: a page's burst).
KEEP_IDLE = 16


class Threads:
    """Daemon threads that run tasks and wait for the next one.

    Args:
        name: the threads' name.
        keep: idle threads kept at most; one past it ends.
        report: told a task's exception (in its ``except``), the thread goes on.
    """

    def __init__(
        self, name: str, keep: int = KEEP_IDLE, report: Callable[[Exception], None] | None = None
    ) -> None:
        self.name = name
        self.keep = keep
        self.report = report
        self._lock = threading.Lock()
        self._idle = 0
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on an idle thread, or a new one.

        Raises:
            RuntimeError: no thread could be started (a pids limit), as ``Thread.start``.
        """
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._tasks.put(task)  # exactly one idle thread waits for each count
                return
        threading.Thread(target=self._loop, args=(task,), name=self.name, daemon=True).start()

    def idle(self) -> int:
        with self._lock:
            return self._idle

    def _loop(self, first: Callable[[], None]) -> None:
        self._run(first)
        del first  # an idle thread holds nothing of its last connection
        while self._wait():
            self._run(self._tasks.get())

    def _wait(self) -> bool:
        """Count this thread idle; False: enough are, it ends."""
        with self._lock:
            if self._idle >= self.keep:
                return False
            self._idle += 1
            return True

    def _run(self, task: Callable[[], None]) -> None:
        try:
            task()
        except Exception as exc:
            if self.report is not None:
                self.report(exc)
