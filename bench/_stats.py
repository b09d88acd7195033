"""Percentiles shared by the benchmarks (nearest rank, no interpolation)."""

from __future__ import annotations


def pct(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values``, by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
