"""The server side of batches: the manager, its lanes, the run loop and the store."""

from __future__ import annotations

__all__: list[str] = []
