"""The load of a chaos scenario: sessions whose every turn appends its number to a file.

``parallel`` threads per session (one by default; several, to prove that
overlapping turns of a session keep exactly-once) run turn after turn
(``echo N >> turns.log``, then a short sleep so that faults land in the middle
of turns as often as between them), each turn with the next number of its
session, and record what the client was told in the scenario's ``Accounting``.
A turn answered with an error is not retried by the load: the SDK's own
retries (same idempotency key) are the only ones, as for a real agent that
moves on; the next turn has the next number.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx

from sandgrid.client import Client, Session
from sandgrid.errors import SandgridError
from tests.chaos.accounting import Accounting, Call, ran_of

__all__ = [
    "ERROR_PAUSE_S",
    "LOG_FILE",
    "TURN_SLEEP_S",
    "TURN_TIMEOUT_S",
    "Load",
    "turn_command",
]

LOG_FILE = "turns.log"
TURN_SLEEP_S = 0.2
ERROR_PAUSE_S = 0.2
TURN_TIMEOUT_S = 10


def turn_command(number: int) -> str:
    return f"echo {number} >> {LOG_FILE}; sleep {TURN_SLEEP_S}"


class Load:
    """Turns on ``sessions`` sessions of ``client`` until stopped.

    Args:
        client: the tenant's client (httpx clients are safe across threads).
        accounting: where each call is recorded.
        sessions: how many sessions.
        parallel: threads per session: turns of one session at once.
    """

    def __init__(
        self, client: Client, accounting: Accounting, sessions: int = 1, parallel: int = 1
    ) -> None:
        self.client = client
        self.accounting = accounting
        self.parallel = parallel
        self.sessions: list[Session] = [client.session() for _ in range(sessions)]
        self._numbers = {s.id: itertools.count(1) for s in self.sessions}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.done = 0
        """Calls answered so far (acknowledged or not), across sessions."""

    def _run(self, session: Session) -> None:
        while not self._stop.is_set():
            with self._lock:
                number = next(self._numbers[session.id])
            self._one(session, number)

    def _one(self, session: Session, number: int) -> None:
        start = time.monotonic()
        code: str | None = None
        ran: bool | None = None
        node = ""
        saved = True
        overlapped = False
        try:
            result = session.exec(shell=turn_command(number), timeout_s=TURN_TIMEOUT_S)
            node, saved = result.node, result.saved
        except (SandgridError, httpx.HTTPError) as exc:
            code = _code(exc)
            ran = ran_of(exc)
            overlapped = isinstance(exc, SandgridError) and exc.context.get("overlapped") is True
        elapsed = time.monotonic() - start
        call = Call(session.id, number, start, elapsed, code, ran, node, saved, overlapped)
        with self._lock:
            self.accounting.record(call)
            self.done += 1
        if code is not None:
            time.sleep(ERROR_PAUSE_S)

    def progress(self, count: int, timeout: float) -> bool:
        """Whether ``count`` more calls were answered within ``timeout`` seconds."""
        target = self.done + count
        deadline = time.monotonic() + timeout
        while self.done < target:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def wait_acknowledged_after(self, since: float, count: int, timeout: float = 30) -> None:
        """Until ``count`` turns started after ``since`` were acknowledged (or the timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                done = sum(1 for c in self.accounting.acknowledged if c.started >= since)
            if done >= count:
                return
            time.sleep(0.1)

    def under(self, fault: Callable[[], tuple[float, float]], warmup: int = 6) -> None:
        """Run the load, inject ``fault`` after ``warmup`` calls, wait for recovery."""
        with self.running():
            assert self.progress(warmup, 30), f"no load before the fault ({self.done} calls)"
            window = fault()
            self.accounting.fault(*window)
            self.wait_acknowledged_after(window[1], 2 * len(self.sessions))

    @contextmanager
    def running(self) -> Iterator[Load]:
        """Run the threads inside the block; stop them and read the files after it."""
        self._threads = [
            threading.Thread(target=self._run, args=(s,), name=f"load-{s.id}-{i}", daemon=True)
            for s in self.sessions
            for i in range(self.parallel)
        ]
        for t in self._threads:
            t.start()
        try:
            yield self
        finally:
            self._stop.set()
            for t in self._threads:
                t.join(TURN_TIMEOUT_S + 40)
        self.collect()

    def collect(self) -> None:
        """Read each session's file into the accounting, then close the sessions."""
        for s in self.sessions:
            self.accounting.files[s.id] = _read_log(s)
            s.close()


def _code(exc: Exception) -> str:
    """A sandgrid error's code, or ``client:<Type>`` for a transport error of the SDK."""
    return str(exc.code) if isinstance(exc, SandgridError) else f"client:{type(exc).__name__}"


def _read_log(session: Session) -> str:
    """The file, read with retries: the grid may still be settling after the fault."""
    deadline = time.monotonic() + 30
    while True:
        try:
            content = session.read_file(LOG_FILE)
            return content if isinstance(content, str) else content.decode()
        except SandgridError as exc:
            if exc.code == "not_found" and "turns.log" in exc.message:
                return ""
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
