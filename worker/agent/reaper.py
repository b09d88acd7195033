"""PID 1's duty: reap every child, and hand the statuses the agent awaits to their waiters."""

from __future__ import annotations

import os
import threading

__all__ = ["REAPER", "Reaper"]


class Reaper:
    """Reap every child (PID 1 inherits all orphans); keep the statuses we await."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.wanted: set[int] = set()
        self.status: dict[int, int] = {}
        self._kick = threading.Event()

    def start(self) -> None:
        """Run the reaping thread (a daemon: it dies with the agent)."""
        threading.Thread(target=self._run, name="reaper", daemon=True).start()

    def kick(self) -> None:
        """A child was started or killed: reap until none is left."""
        self._kick.set()

    def _run(self) -> None:
        while True:
            self._kick.wait()
            self._kick.clear()
            while True:
                try:
                    pid, st = os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                except InterruptedError:  # pragma: no cover - PEP 475 retries
                    continue
                with self.cond:
                    if pid in self.wanted:
                        self.wanted.discard(pid)
                        self.status[pid] = st
                        self.cond.notify_all()

    def wait(self, pid: int, timeout: float) -> int | None:
        """The wait status of ``pid`` (added to ``wanted`` first), or None after ``timeout``."""
        with self.cond:
            self.cond.wait_for(lambda: pid in self.status, timeout)
            return self.status.pop(pid, None)


REAPER = Reaper()
