"""The benchmarks' CPU split (bench/_cpu.py, 22.1): a window counts this process's
time and its children's, once each, including a child that ended inside it."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support.bench_modules import bench_module

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _burn(seconds: float) -> None:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def test_a_window_counts_this_process_and_a_child_reaped_inside_it() -> None:
    cpu = bench_module("_cpu")
    with cpu.cpu_window() as split:
        _burn(0.3)
        subprocess.run([sys.executable, "-c", BURN.format(s=0.3)], check=True)
    assert 0.5 <= split.seconds["bench"] <= 1.2, split.seconds
    assert split.wall_s >= 0.5 and 0.0 < split.busy <= 1.0
    assert "ms of CPU each" in split.per(2) and "bench" in split.per(2)


def test_a_child_that_ended_inside_the_window_counts_only_its_time_inside() -> None:
    """Its whole time reappears as its reaper's children's time: what it had used
    before the window is taken off again, not counted twice."""
    cpu = bench_module("_cpu")
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.0)])
    time.sleep(0.6)  # the child has used ~0.6 s before the window opens
    with cpu.cpu_window() as split:
        child.wait()
    assert split.seconds["bench"] <= 0.8, split.seconds  # ~0.4 s, never the whole 1.0


def test_a_grandchild_that_ended_with_its_parent_counts_in_the_surviving_ancestor() -> None:
    """A sandbox's processes end with its container: what the grandchild used before
    the window comes off the kind that received it (here the bench's), not its
    ended parent's (``other``), which would go below zero."""
    cpu = bench_module("_cpu")
    burn = BURN.format(s=0.6) + "print('half', flush=True)\n" + BURN.format(s=0.4)
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "half\n"  # the grandchild used 0.6 s before the window
    with cpu.cpu_window() as split:
        proc.wait()
    proc.stdout.close()
    assert split.seconds["bench"] <= 0.8, split.seconds  # ~0.4 s, not the whole 1.0
    assert split.seconds["other"] >= -0.05, split.seconds


def test_wait_quiet_returns_once_the_machine_is_quiet_or_at_its_limit() -> None:
    cpu = bench_module("_cpu")
    waited = cpu.wait_quiet(busy_below=1.01, within_s=10.0, steps=1)  # always quiet
    assert 0.9 <= waited < 3.0
    waited = cpu.wait_quiet(busy_below=0.0, within_s=1.5, steps=1)  # never quiet
    assert 1.5 <= waited < 4.0
