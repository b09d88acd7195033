"""The reaper: idle sessions are snapshotted and released; orphans are removed;
snapshots of the tenants this node served are collected when due.

An idle session whose snapshot fails (the store is down) is kept, not
released, so that its changes are not lost; the next pass tries again. An idle
session created with ``on_idle: "memory"`` is paused with its processes
(``worker.turns.memory``), background processes and all, and its image staged
ahead on another node (``worker.turns.memory_stage``); when it cannot be
(an egress connection open), it is treated as any other.

Every container the grid makes carries ``sandgrid.managed=1`` and the label of
its worker node. A container of this node that neither the warm pool nor the
session table holds belongs to no live session: it is removed. At start every
container of this node is an orphan (the process that made it is gone).

When the Docker daemon restarts, every container stops: ``reconcile`` finds the
local sessions and warm sandboxes whose container no longer runs, drops them
(a session then goes on from its last snapshot at its next turn, on any node)
and lets the pool refill; the orphan pass then removes the exited containers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from sandgrid.errors import SandgridError
from sandgrid.wire.periodic import Periodic
from worker.ops.processes import keeps_resident
from worker.sandboxes import SandboxManager
from worker.sessions.pool_protocol import SandboxPool
from worker.sessions.table import LocalSession, SessionTable
from worker.turns import memory, memory_stage
from worker.turns.residency import Residency
from worker.turns.snapshot_policy import Persistence

__all__ = [
    "ORPHAN_GRACE_S",
    "REAP_INTERVAL_S",
    "Reaper",
]

log = logging.getLogger(__name__)

REAP_INTERVAL_S = 5.0
ORPHAN_GRACE_S = 30.0
"""A container younger than this may be in the middle of being created."""


class Reaper:
    """A daemon thread that releases idle sessions and collects orphans.

    Args:
        node: the node's name (the label of its containers).
        sessions: the node's session table.
        pool: the node's pool (its containers are not orphans).
        backends: every backend of the node now (where containers are listed): asked at
            each use, since a node makes a runtime's backend when it first serves a type
            of that runtime (one added at runtime, or matched by a ``--types`` pattern).
        residency: releases an idle session.
        persistence: collects snapshots when due.
        idle_ttl_s: a session idle this long is released.
        interval_s: seconds between passes.
    """

    def __init__(
        self,
        node: str,
        sessions: SessionTable,
        pool: SandboxPool,
        backends: Callable[[], Sequence[SandboxManager]],
        residency: Residency,
        persistence: Persistence,
        *,
        idle_ttl_s: float,
        interval_s: float = REAP_INTERVAL_S,
    ) -> None:
        self.node = node
        self.sessions = sessions
        self.pool = pool
        self.backends = backends
        self.residency = residency
        self.persistence = persistence
        self.idle_ttl_s = idle_ttl_s
        self.interval_s = interval_s
        self._loop = Periodic(self._pass, interval_s, "reaper", log, join_s=10.0)

    def reap_idle(self) -> int:
        """Snapshot and release sessions idle past the TTL; how many were released."""
        cutoff = time.monotonic() - self.idle_ttl_s
        count = 0
        for local in self.sessions.idle_since(cutoff):
            if not local.gate.try_alone():
                continue  # a turn is running: not idle
            try:
                if self.sessions.get(local.session_id) is not local:
                    continue  # closed or dropped meanwhile
                if local.on_idle == "memory" and self._pause_with_memory(local):
                    count += 1
                    continue
                if keeps_resident(self.backends(), local):
                    continue  # a background process runs in it: it stays on this node
                log.info("session %s: idle, releasing", local.session_id)
                if self.residency.release(local, snapshot=True, keep_on_failure=True):
                    count += 1
            finally:
                local.gate.release()
        return count

    def _pause_with_memory(self, local: LocalSession) -> bool:
        """Pause an idle ``on_idle: memory`` session with its processes (the caller holds
        its gate alone); False when it cannot be (then it is treated as any other)."""
        backend = next(b for b in self.backends() if b.runtime == local.sandbox.runtime)
        try:
            memory.check_savable(backend, local.sandbox)
            self.persistence.on_release(local)
        except SandgridError as exc:
            log.info("session %s: idle, not paused with memory: %s", local.session_id, exc)
            return False
        log.info("session %s: idle, pausing with memory", local.session_id)
        ledger, store = self.residency.ledger, self.persistence.store
        try:
            memory_stage.pause(self.node, ledger, store, backend, local)
        finally:
            self.residency.discard(local)
        return True

    def reconcile(self) -> int:
        """Drop what lives here but whose container no longer runs; how many dropped.

        A session in the middle of a turn is left to that turn (its channel breaks
        and the executor drops it). When the runtime does not answer (the daemon
        is down), nothing is dropped: the next pass tries again.
        """
        # What existed before the listing: a container made after it is not judged.
        sessions, warm = list(self.sessions), self.pool.container_ids()
        running: set[str] = set()
        for backend in self.backends():
            running |= {c["id"] for c in backend.list_managed(self.node) if c.get("running")}
        dropped = self.pool.prune(warm - running)
        for local in sessions:
            if local.sandbox.id in running or not local.gate.try_alone():
                continue
            try:
                if self.sessions.get(local.session_id) is local:
                    log.warning(
                        "session %s: its container %s is gone; the next turn restores its "
                        "last snapshot",
                        local.session_id,
                        local.sandbox.name,
                    )
                    local.sandbox.state = "lost"
                    self.residency.discard(local)
                    dropped += 1
            finally:
                local.gate.release()
        return dropped

    def collect_orphans(self, *, startup: bool = False) -> int:
        """Remove this node's containers that no live session or pool holds."""
        held = self.sessions.container_ids() | self.pool.container_ids()
        removed = 0
        for backend in self.backends():
            for c in backend.list_managed(self.node):
                young = time.time() - float(c.get("created", 0)) < ORPHAN_GRACE_S
                if c["id"] in held or (young and not startup):
                    continue
                log.warning("removing orphan container %s", c.get("name", c["id"]))
                backend.remove_container(c["id"])
                removed += 1
        return removed

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _pass(self) -> None:
        """One round: each step on its own, so that one failing leaves the others."""
        steps = (self.reconcile, self.reap_idle, self.collect_orphans)
        for step in (*steps, self.persistence.collect_due):
            try:
                step()
            except Exception:
                log.exception("reaper step %s failed", step.__name__)
