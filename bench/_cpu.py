"""Where the machine's CPU goes over a window, by kind of process (Linux ``/proc``).

``cpu_window()`` is a context manager: it reads every process's CPU time (its
own and its reaped children's) and the machine's at the start and at the end,
and yields a ``CpuSplit`` filled in at the end. A process is counted by kind:
the grid's API (``sandgrid.cli serve``), its nodes (``sandgrid.cli worker``),
the sandboxes (anything in a Docker container's cgroup: the agent, its launcher
host, the commands they ran), Docker's relay (``dockerd``, ``containerd``, the
shims), Redis, this process (the bench's clients), and the rest. A process that
ended inside the window is counted in the nearest ancestor still there (whose
children's time took its time), less what it had used before the window; one
that started and ended inside the window and was not reaped by one that is
still there is not seen: the machine's busy time, read apart, shows what that
leaves.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CpuSplit", "cpu_window", "wait_quiet"]

KINDS = ("api", "nodes", "sandboxes", "docker", "redis", "bench", "other")
_DOCKER = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc", "runsc")


@dataclass
class CpuSplit:
    """CPU seconds per kind over the window, the window's length, the machine's busy share."""

    seconds: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    busy: float = 0.0

    def per(self, n: int) -> str:
        """Milliseconds of CPU per unit of work (``n`` units in the window), by kind."""
        total = sum(self.seconds.values())
        parts = ", ".join(f"{k} {self.seconds.get(k, 0.0) / n * 1000:.2f}" for k in KINDS)
        return (
            f"{total / n * 1000:.2f} ms of CPU each ({parts}); machine busy {self.busy:.0%} "
            f"of {os.cpu_count()} cores"
        )


def _kind(pid: int, comm: str) -> str:
    if pid == os.getpid():
        return "bench"
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return "other"
    if "/docker/" in cgroup:
        return "sandboxes"
    if b"sandgrid.cli serve" in cmdline:
        return "api"
    if b"sandgrid.cli worker" in cmdline:
        return "nodes"
    if comm in _DOCKER or comm.startswith("containerd-shim"):
        return "docker"
    return "redis" if comm == "redis-server" else "other"


Procs = dict[tuple[int, str], tuple[str, int, int]]
"""Per process (pid, start time): its kind, CPU ticks and parent's pid."""


def _ticks() -> Procs:
    """Every process now; its ticks include its reaped children's."""
    out: Procs = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = (entry / "stat").read_text()
            comm = raw[raw.find("(") + 1 : raw.rfind(")")]
            fields = raw[raw.rfind(")") + 2 :].split()
            ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
            pid = int(entry.name)
            out[(pid, fields[19])] = (_kind(pid, comm), ticks, int(fields[1]))
    return out


def _reaper_kinds(before: Procs, after: Procs) -> dict[int, str | None]:
    """Per process that ended inside the window (by pid): the kind of its nearest
    ancestor still there at the end (whose children's time took the ended one's),
    through parents that ended too; None: none is known.

    A sandbox's processes end with its container: their time lands, through the
    container's first process, in the shim's; it is taken off the shim's kind."""
    survivors = {
        pid: kind for (pid, start), (kind, _, _) in before.items() if (pid, start) in after
    }
    parents = {pid: parent for (pid, _), (_, _, parent) in before.items()}
    out: dict[int, str | None] = {}
    for pid, start in before:
        if (pid, start) in after:
            continue
        ppid, seen = parents[pid], {pid}
        while ppid not in survivors and ppid in parents and ppid not in seen:
            seen.add(ppid)
            ppid = parents[ppid]
        out[pid] = survivors.get(ppid)
    return out


def _machine() -> tuple[int, int]:
    """The machine's (busy, total) ticks since boot."""
    values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@contextlib.contextmanager
def cpu_window() -> Iterator[CpuSplit]:
    """The CPU used by each kind of process between entering and leaving the block."""
    split = CpuSplit()
    before, (busy0, total0), t0 = _ticks(), _machine(), time.perf_counter()
    yield split
    after, (busy1, total1) = _ticks(), _machine()
    split.wall_s = time.perf_counter() - t0
    hz = os.sysconf("SC_CLK_TCK")
    seconds = dict.fromkeys(KINDS, 0.0)
    for key, (kind, ticks, _) in after.items():
        seconds[kind] += (ticks - before[key][1] if key in before else ticks) / hz
    reapers = _reaper_kinds(before, after)
    for key, (kind, ticks, _) in before.items():
        if key not in after:  # ended: its whole time went to its reaper's children's time
            seconds[reapers[key[0]] or kind] -= ticks / hz
    split.seconds = seconds
    split.busy = (busy1 - busy0) / max(total1 - total0, 1)


def wait_quiet(busy_below: float = 0.25, within_s: float = 60.0, steps: int = 2) -> float:
    """Wait until the machine's busy share stays below ``busy_below`` for ``steps``
    seconds in a row (the grid's warm pools refilled after a burst of new sessions,
    say), at most ``within_s``. Returns the seconds waited."""
    t0, quiet = time.perf_counter(), 0
    while quiet < steps and time.perf_counter() - t0 < within_s:
        busy0, total0 = _machine()
        time.sleep(1.0)
        busy1, total1 = _machine()
        quiet = quiet + 1 if (busy1 - busy0) / max(total1 - total0, 1) < busy_below else 0
    return time.perf_counter() - t0
