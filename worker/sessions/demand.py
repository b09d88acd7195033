"""How many warm sandboxes of a type to keep ahead: its floor, raised by observed demand.

Issue 22.3: a session's create should not wait for a cold create, and a fixed
pool of one per type runs dry at the second create of a burst. The pool counts
every take (a hit or a miss) per type over a sliding window of ``window_s``,
and measures the create+ready time of its sandboxes (create, start, first
ping: ``refill_s``, a moving average). The target covers the takes expected
during one refill, at the busiest rate the window saw::

    peak   = the most takes of the window within any refill_s of each other
    target = clamp(peak, floor, ceiling)

The busiest rate, not the average: sessions come in bursts (a batch, an agent
fanning out), and the average of a window that holds one burst asks for a
fraction of a sandbox. A steady stream of ``r`` per second asks for about
``r * refill_s``; a burst of ``n`` within one refill asks for ``n``. The time
in which a miss was creating its sandbox is taken out of the takes' clock: a
client that creates sessions one after another waits for each miss, so its
takes come no faster than one per create, and the demand would be hidden by
the very misses it causes (concurrent misses count once). When the takes stop
the target holds while the burst is in the window, then falls back to the floor.

The floor is the type's configured ``pool_size``; the ceiling is the most the
node lets one type keep warm (``SANDGRID_WORKER__POOL_MAX``, never below the
floor). A type with floor 0 keeps none, whatever its demand (a type the node
stopped serving, or one declared with ``pool_size = 0``). The node keeps at
most ``SANDGRID_WORKER__POOL_TOTAL`` warm across its types, floors first
(``next_to_fill``).

Not thread-safe: the pool calls it under its own lock. The clock is injected,
so the tests drive it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_REFILL_S",
    "DEMAND_WINDOW_S",
    "MAX_TAKES",
    "MIN_REFILL_S",
    "REFILL_ALPHA",
    "Demand",
    "TypeDemand",
    "next_to_fill",
]

#: How far back takes count.
DEMAND_WINDOW_S = 60.0
#: The create+ready time assumed before the first one was measured.
DEFAULT_REFILL_S = 0.5
#: The shortest create+ready time the rule counts with (a fake backend's is 0).
MIN_REFILL_S = 0.001
#: The weight of a new create+ready measurement in the moving average.
REFILL_ALPHA = 0.3
#: The most takes remembered per type (a burst of more within one refill is capped).
MAX_TAKES = 4096


@dataclass
class TypeDemand:
    """One type's takes and create+ready time.

    ``takes`` holds ``(monotonic time, the takes' clock)`` of each take: the takes'
    clock is the monotonic time less ``busy_s``, the time misses spent creating.
    """

    takes: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=MAX_TAKES))
    busy_s: float = 0.0
    busy_until: float = float("-inf")
    refill_s: float = DEFAULT_REFILL_S
    measured: bool = False
    peak: int | None = None  # cached until the takes or refill_s change


class Demand:
    """The demand of every type the pool serves, and the target it asks for.

    Args:
        window_s: how far back takes count.
        clock: monotonic seconds (``time.monotonic``; a fake in the tests).
    """

    def __init__(
        self, window_s: float = DEMAND_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, not {window_s}")
        self.window_s = window_s
        self.clock = clock
        self._types: dict[str, TypeDemand] = {}

    def took(self, sandbox_type: str) -> None:
        """A session took a sandbox of the type (a hit or a miss alike)."""
        d = self._of(sandbox_type)
        now = self.clock()
        d.takes.append((now, now - d.busy_s))
        d.peak = None

    def missed(self, sandbox_type: str, start: float, end: float) -> None:
        """A take found no warm sandbox and created one from ``start`` to ``end``."""
        d = self._of(sandbox_type)
        d.busy_s += max(0.0, end - max(start, d.busy_until))
        d.busy_until = max(d.busy_until, end)

    def created(self, sandbox_type: str, seconds: float) -> None:
        """A sandbox of the type took ``seconds`` from create to its first answer."""
        d = self._of(sandbox_type)
        if d.measured:
            d.refill_s += REFILL_ALPHA * (seconds - d.refill_s)
        else:
            d.refill_s, d.measured = seconds, True
        d.peak = None

    def refill_s(self, sandbox_type: str) -> float:
        return self._of(sandbox_type).refill_s

    def expected(self, sandbox_type: str) -> int:
        """The takes expected during one refill: the most the window saw within one."""
        d = self._of(sandbox_type)
        now = self.clock()
        while d.takes and now - d.takes[0][0] > self.window_s:
            d.takes.popleft()
            d.peak = None
        if d.peak is None:
            d.peak = _peak(sorted(t for _, t in d.takes), max(d.refill_s, MIN_REFILL_S))
        return d.peak

    def target(self, sandbox_type: str, floor: int, ceiling: int) -> int:
        """Warm sandboxes to keep: the expected takes, within ``[floor, max(floor, ceiling)]``."""
        if floor <= 0:
            return 0
        return max(floor, min(self.expected(sandbox_type), max(floor, ceiling)))

    def _of(self, sandbox_type: str) -> TypeDemand:
        return self._types.setdefault(sandbox_type, TypeDemand())


def next_to_fill(
    have: dict[str, int], floors: dict[str, int], targets: dict[str, int], total: int
) -> str | None:
    """The type whose next warm sandbox to make, or None: every type at its target,
    or the node at its cap.

    A type below its floor comes before any type that demand raised, so demand
    on one type never keeps another from the pool size its operator set; the
    node's cap (``total``, 0: none) bounds them all together.

    Args:
        have: warm sandboxes per type, made or being made.
        floors: each type's ``pool_size``; targets: each type's target now.
        total: the most the node keeps across its types.
    """
    if total > 0 and sum(have.values()) >= total:
        return None
    below = [t for t in targets if have.get(t, 0) < targets[t]]
    for t in below:
        if have.get(t, 0) < floors.get(t, 0):
            return t
    return below[0] if below else None


def _peak(times: list[float], span: float) -> int:
    """The most of the sorted ``times`` within ``span`` of the first of them."""
    most, lo = 0, 0
    for hi, t in enumerate(times):
        while lo < hi and t - times[lo] >= span:
            lo += 1
        most = max(most, hi - lo + 1)
    return most
