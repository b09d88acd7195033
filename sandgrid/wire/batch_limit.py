"""How many threads of a worker node batch turns may take: one rule, both sides.

The scheduler sums it over the live nodes to size the grid-wide batch
semaphore (``scheduler.batch.capacity``); each node enforces it for itself
(``worker.turns.entry``).
"""

from __future__ import annotations

__all__ = ["batch_limit"]


def batch_limit(concurrency: int) -> int:
    """Threads of a node with ``concurrency`` threads that batch jobs may use.

    Half (at least one) is kept for interactive turns; a one-thread node cannot
    keep any and lends its thread. Why half and not just one: on a 2-core node
    four batch lanes already take all the CPU (measured by bench/bench_batch.py:
    six lanes ran no faster than four), and every further batch thread only
    adds to the interactive turns' wait for a core.
    """
    reserve = max(1, concurrency // 2)
    return max(1, concurrency - reserve)
