"""The audit trail on the control plane: ``log`` records and queries it (a Redis
Stream per tenant), ``export`` moves old records to per-day segments in the store."""

from __future__ import annotations

__all__: list[str] = []
