"""Adapters that plug sandgrid into agent frameworks; each is an optional extra."""

from __future__ import annotations

__all__: list[str] = []
