"""sandgrid's data plane: sandboxes, warm pools, exec channel, snapshots."""

from __future__ import annotations

__all__: list[str] = []
