"""The node's heartbeat: says the node is alive and renews its sessions' leases.

A lease outlives a heartbeat by ``lease_ttl_s``; when the node dies, its leases
expire and the next turn of each session goes to the shared queue, where any
worker takes it and restores the latest snapshot.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["Heartbeat"]

log = logging.getLogger(__name__)

NODE_TTL_BEATS = 3
"""A node is dead after this many missed beats; its leases can be taken then."""


class Heartbeat:
    """A daemon thread beating every ``settings.heartbeat_s`` seconds."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """One beat: node key, then every local session's lease."""
        node = self.node
        node.registry.heartbeat(node.name, NODE_TTL_BEATS * node.settings.heartbeat_s)
        ids = node.sessions.ids()
        if ids:
            lost = node.registry.renew_leases(node.name, ids)
            for sid in lost or []:
                local = node.sessions.get(sid)
                if local is not None:  # another node took it over: ours is stale
                    log.warning("session %s: lease lost, dropping the local sandbox", sid)
                    node.discard(local)

    def start(self) -> None:
        self.beat()
        self._thread = threading.Thread(target=self._run, name="sandgrid-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.node.settings.heartbeat_s):
            try:
                self.beat()
            except Exception:
                log.exception("heartbeat failed")
