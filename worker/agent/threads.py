"""The request threads: the agent runs the requests of one channel at once.

A session runs several turns at once (the scheduler's ``max_parallel_turns``),
as commands in one container do, so the agent answers requests in any order:
the main loop reads each frame and hands it to a request thread, which runs
its op and writes the reply (``framing.send`` writes whole frames under a
lock). The first thread is made at start, before any user code runs; more
are made on demand up to ``MAX_THREADS`` and kept: a sandbox that only ever
runs one turn at a time has one. A thread that cannot be made
(a fork bomb has taken every pid the sandbox has, and threads count) is no
error: the request waits for a thread that is already there, so the agent is
never without one.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

from .errors import Json, log

__all__ = ["MAX_THREADS", "RequestThreads"]

#: Request threads at most: the scheduler's ceiling of turns at once, and two
#: more for the snapshot's requests (a scan, a pack) beside them.
MAX_THREADS = int(os.environ.get("SANDGRID_AGENT_THREADS", "") or 0) or 18


class RequestThreads:
    """Run ``serve(request)`` for each request on a pool that grows on demand.

    Args:
        serve: runs one request to its reply (it never raises).
        limit: threads at most.
    """

    def __init__(self, serve: Callable[[Json], None], limit: int = MAX_THREADS) -> None:
        self._serve = serve
        self._limit = max(1, limit)
        self._queue: queue.SimpleQueue[Json] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._threads = 0
        self._idle = 0  # threads waiting for a request
        self._pending = 0  # requests not yet taken by a thread
        # One from the start, before any user code runs: the agent is never without one.
        self._threads = 1 if self._start() else 0

    def submit(self, req: Json) -> None:
        """Run ``req`` on an idle thread, a new one, or the first to free up."""
        with self._lock:
            self._pending += 1
            grow = self._pending > self._idle and self._threads < self._limit
            if grow:
                self._threads += 1
        if grow and not self._start():
            with self._lock:
                self._threads -= 1
        self._queue.put(req)

    def drain(self) -> None:
        """Wait until every request submitted has answered (EOF: the worker detached;
        the requests in flight end as they would have, then the agent exits)."""
        with self._lock:
            self._lock.wait_for(lambda: self._pending == 0 and self._idle == self._threads)

    @property
    def size(self) -> int:
        with self._lock:
            return self._threads

    def _start(self) -> bool:
        try:
            threading.Thread(target=self._run, name="request", daemon=True).start()
        except RuntimeError as exc:  # no pid left for a thread: queue behind the others
            log(f"cannot start a request thread ({exc}); the request waits for one")
            return False
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
                self._lock.notify_all()
            req = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._pending -= 1
            self._serve(req)
