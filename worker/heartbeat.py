"""The node's heartbeat: says the node is alive and renews its sessions' leases.

A lease outlives a heartbeat by ``lease_ttl_s``; when the node dies, its leases
expire and the next turn of each session goes to the shared queue, where any
worker takes it and restores the latest snapshot.

The beat carries the process's incarnation (a random id per process) and the
types the node serves: the API watches a turn's holder by incarnation, so a
node restarted under the same name is seen as a new process at its first beat,
and it refuses at once the types that no live node serves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.periodic import Periodic
from worker.sessions.table import SessionTable
from worker.turns.residency import Residency

__all__ = [
    "NODE_TTL_BEATS",
    "Heartbeat",
]

log = logging.getLogger(__name__)

NODE_TTL_BEATS = 3
"""A node is dead after this many missed beats; its leases can be taken then."""


class Heartbeat:
    """A daemon thread beating every ``interval_s`` seconds.

    Args:
        node: the node's name.
        ledger: where the node key and the leases live.
        sessions: the sessions whose leases it renews.
        residency: drops a session whose lease another node took.
        interval_s: seconds between beats (``SANDGRID_HEARTBEAT_S``).
        incarnation: this process's random id.
        types: the sandbox types the node serves.
        metrics_port: the port of the node's ``/metrics``. metrics_host: its host.
    """

    def __init__(
        self,
        node: str,
        ledger: SessionLedger,
        sessions: SessionTable,
        residency: Residency,
        interval_s: float,
        *,
        incarnation: str = "",
        types: Sequence[str] = (),
        metrics_port: int | None = None,
        metrics_host: str = "",
    ) -> None:
        self.node = node
        self.incarnation = incarnation
        self.types = tuple(types)
        #: Where the node's ``/metrics`` is (set when the node starts serving it).
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        #: Issue 21.1: where the node's port listener is (set when it listens).
        self.ports_addr = ""
        self.ledger = ledger
        self.sessions = sessions
        self.residency = residency
        self.interval_s = interval_s
        self._loop = Periodic(self.beat, interval_s, "heartbeat", log)
        self._last: float | None = None

    def beat(self) -> None:
        """One beat: node key, then every local session's lease."""
        ttl = NODE_TTL_BEATS * self.interval_s
        self._note_gap(ttl)
        self.ledger.heartbeat(
            self.node,
            ttl,
            incarnation=self.incarnation,
            types=self.types,
            metrics_port=self.metrics_port,
            metrics_host=self.metrics_host,
            ports_addr=self.ports_addr,
        )
        ids = self.sessions.ids()
        if ids:
            for sid in self.ledger.renew_leases(self.node, ids):
                local = self.sessions.get(sid)
                if local is not None:  # another node took it over: ours is stale
                    log.warning("session %s: lease lost, dropping the local sandbox", sid)
                    self.residency.discard(local)

    def _note_gap(self, ttl: float) -> None:
        """Warn when this beat comes late: past two intervals the node's record is
        close to lapsing, and the API soon refuses its types as served by no one."""
        now = time.monotonic()
        gap = None if self._last is None else now - self._last
        self._last = now
        if gap is not None and gap > 2 * self.interval_s:
            log.warning(
                "heartbeat: %.1f s since the last beat (every %.1f s; the record lives %.1f s)",
                gap,
                self.interval_s,
                ttl,
            )

    def start(self) -> None:
        self.beat()
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
