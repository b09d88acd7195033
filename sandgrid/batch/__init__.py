"""The client side of batches: the job and result models, the results journal, progress."""

from __future__ import annotations

__all__: list[str] = []
