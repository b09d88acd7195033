"""Exposed ports on the API side (issue 21.1, docs/ports.md).

``tunnel`` opens a connection to a session's port through its owning worker,
``forward`` relays one HTTP request over it, ``websocket`` one WebSocket,
``previews`` makes and checks the signed preview URLs.
"""

from __future__ import annotations

__all__: list[str] = []
