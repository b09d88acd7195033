"""The relay's threads (``linkthreads``): reused when idle, never a queue behind a busy one."""

from __future__ import annotations

import threading

from worker.agent.linkthreads import Threads


def _ran(
    threads: Threads, block: threading.Event | None = None
) -> tuple[threading.Event, list[int]]:
    """Submit a task that records its thread (and waits for ``block``); (started, idents)."""
    started, idents = threading.Event(), []

    def task() -> None:
        idents.append(threading.get_ident())
        started.set()
        if block is not None:
            block.wait(10)

    threads.submit(task)
    return started, idents


def _until_idle(threads: Threads, n: int) -> None:
    for _ in range(1000):
        if threads.idle() == n:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{threads.idle()} idle threads, not {n}")


def test_an_idle_thread_runs_the_next_task() -> None:
    threads = Threads("t")
    first, one = _ran(threads)
    assert first.wait(10)
    _until_idle(threads, 1)
    second, two = _ran(threads)
    assert second.wait(10) and one == two and threads.idle() in (0, 1)


def test_a_busy_thread_never_holds_a_task_back_and_idle_ones_are_capped() -> None:
    threads = Threads("t", keep=1)
    release = threading.Event()
    busy = [_ran(threads, release) for _ in range(3)]  # three at once: three threads
    assert all(started.wait(10) for started, _ in busy)
    assert len({idents[0] for _, idents in busy}) == 3
    release.set()
    _until_idle(threads, 1)  # two of them ended, one waits


def test_a_failing_task_is_reported_and_leaves_its_thread_usable() -> None:
    failed: list[Exception] = []
    threads = Threads("t", report=failed.append)

    def fail() -> None:
        raise ValueError("boom")

    threads.submit(fail)
    _until_idle(threads, 1)
    started, _ = _ran(threads)
    assert started.wait(10) and [str(e) for e in failed] == ["boom"]
