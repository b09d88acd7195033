"""sandgrid's control plane: the HTTP API, admission, routing, the turn runner,
the session registry and the server side of batches. Imports ``sandgrid``, never ``worker``."""

from __future__ import annotations

__all__: list[str] = []
