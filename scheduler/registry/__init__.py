"""The session registry in Redis: sessions, leases, turns; its Lua scripts in ``lua/``."""

from __future__ import annotations

__all__: list[str] = []
