"""The server side of batches: the manager, its lanes, the run loop, the store,
and the grid's batch capacity (``capacity``: the grid-wide batch semaphore)."""

from __future__ import annotations

__all__: list[str] = []
