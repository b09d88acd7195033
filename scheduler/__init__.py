"""sandgrid's control plane and public contract: models, errors, names, API, SDK."""

from __future__ import annotations

__all__: list[str] = []
