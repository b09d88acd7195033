"""Percentiles (nearest rank, no interpolation) and async timing shared by the benchmarks."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values``, by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def timed_async(
    n: int, turn: Callable[[], Awaitable[object]], warmup: int = 10
) -> list[float]:
    """Milliseconds of each of ``n`` awaited calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        await turn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await turn()
        out.append((time.perf_counter() - t0) * 1000)
    return out
