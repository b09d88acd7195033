"""The memory quota where no kernel holds it: inside gVisor.

Under runc the container's memory cgroup holds the quota: at the limit the
host kernel kills the user's biggest process and counts it (``OOM_FILES``).
gVisor's sentry accounts memory per cgroup but enforces no limit (its
``memory.limit_in_bytes`` is a stub), and the host cgroup holds the sandbox as
one: at the host limit the host kernel kills the sentry, and with it the whole
sandbox. So under gVisor the worker gives the host cgroup headroom above the
quota for the sentry itself, and this guard holds the quota inside: it watches
the sandbox's usage and, past the limit, SIGKILLs the user's biggest process,
as the kernel's memory-cgroup OOM killer would, and counts the kill.

It polls (gVisor has no memory pressure events), more often the nearer usage
is to the limit: never later than a fill at ``FASTEST_FILL`` could reach it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from .limits import MEMORY_LIMIT_FILE, MEMORY_USAGE_FILE
from .processes import user_procs
from .reaper import REAPER

__all__ = [
    "FASTEST_FILL",
    "MEMORY",
    "POLL_MAX_S",
    "POLL_MIN_S",
    "VICTIM_WAIT_S",
    "MemoryGuard",
    "biggest_user_process",
    "limit_memory",
]

FASTEST_FILL = 4 << 30
"""Bytes per second: four times the fastest fill measured under gVisor (~1 GB/s)."""
POLL_MIN_S = 0.002
POLL_MAX_S = 0.1
VICTIM_WAIT_S = 1.0


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def biggest_user_process() -> int | None:
    """The live user process with the largest resident set: the OOM killer's pick."""
    best, best_rss = None, -1
    for (pid, _), zombie in user_procs().items():
        if zombie:
            continue
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if rss > best_rss:
            best, best_rss = pid, rss
    return best


class MemoryGuard:
    """Kills the user's biggest process while usage is over ``limit``; counts the kills.

    Args:
        usage_file: where the sandbox's memory usage is read (bytes).
    """

    def __init__(self, usage_file: str = MEMORY_USAGE_FILE) -> None:
        self.usage_file = usage_file
        self.limit: int | None = None
        self.kills = 0

    @property
    def active(self) -> bool:
        """Whether the guard holds the quota (else the kernel does, or nothing)."""
        return self.limit is not None

    def start(self, limit: int) -> None:
        """Hold ``limit`` bytes from now on, in a daemon thread."""
        self.limit = limit
        threading.Thread(target=self._run, name="memory-guard", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.check())

    def check(self) -> float:
        """One look at usage, a kill if it is over the limit; the delay to the next look."""
        usage = _read_int(self.usage_file)
        if usage is None or self.limit is None:
            return POLL_MAX_S
        if usage <= self.limit:
            return min(max((self.limit - usage) / FASTEST_FILL, POLL_MIN_S), POLL_MAX_S)
        victim = biggest_user_process()
        if victim is not None:
            self.kills += 1  # before the kill: whoever sees the death must see the count
            with contextlib.suppress(OSError):
                os.kill(victim, signal.SIGKILL)
            REAPER.kick()
            _wait_dead(victim, time.monotonic() + VICTIM_WAIT_S)
        return POLL_MIN_S


def _wait_dead(pid: int, end: float) -> None:
    """Until ``pid`` has exited (its memory freed) or ``end`` passes."""
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in (b"Z", b"X"):
            return
        time.sleep(POLL_MIN_S)


MEMORY = MemoryGuard()


def limit_memory(limit_file: str = MEMORY_LIMIT_FILE) -> None:
    """Hold ``SANDGRID_MEMORY_MAX`` inside the sandbox where the cgroup is ours to set.

    The limit is written where the program can read it; the write succeeds only
    in gVisor's own cgroupfs (under runc it is read-only and the host kernel
    holds the limit), and then the guard starts.
    """
    want = os.environ.get("SANDGRID_MEMORY_MAX", "")
    if not want.isdigit():
        return
    try:
        with open(limit_file, "w") as f:
            f.write(want)
    except OSError:
        return
    MEMORY.start(int(want))
