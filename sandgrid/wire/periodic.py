"""A daemon thread that runs one callable every ``interval_s`` seconds: the loop
written once (Celery's ``bgThread`` is the model).

Both sides run such loops: the node's heartbeat and reaper, the API's session
expiry sweep and audit export. Each gives its ``tick`` and what to log when a
tick fails; the loop owns the thread, the stop event and the error handling, so
that a failing tick (Redis down, a bug) is logged and the next one runs on time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Periodic"]


class Periodic:
    """Calls ``tick`` every ``interval_s`` seconds in a daemon thread until ``stop``.

    The first tick runs one interval after ``start`` (a caller that wants one at
    once calls its tick itself first). A tick that raises is logged on ``log``
    (``<name> failed``, with the traceback), then ``on_error`` is called; the
    loop goes on.

    Args:
        tick: the work of one round.
        interval_s: seconds between two rounds.
        name: what the loop does, in the log and the thread's name (``sandgrid-<name>``).
        log: the logger of the owning module, so a failure names its source.
        on_error: called after the log when a tick raises (a metric, say).
        join_s: how long ``stop`` waits for the thread to finish its round.
    """

    def __init__(
        self,
        tick: Callable[[], object],
        interval_s: float,
        name: str,
        log: logging.Logger,
        *,
        on_error: Callable[[], None] | None = None,
        join_s: float = 5.0,
    ) -> None:
        self.tick, self.interval_s, self.name, self.log = tick, interval_s, name, log
        self.on_error, self.join_s = on_error, join_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (after ``stop``, one that ends at once)."""
        self._thread = threading.Thread(target=self._run, name=f"sandgrid-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end and wait up to ``join_s`` for its current round."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.join_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # Redis down, a bug: log it, try again next round
                self.log.exception("%s failed; tried again in %ss", self.name, self.interval_s)
                if self.on_error is not None:
                    self.on_error()
