"""How a session leaves this node: saved as its policy says, sandbox destroyed, lease freed.

The executor (a lost sandbox, a close), the heartbeat (a lease lost to another
node), the reaper (idle sessions), the batch gate (one-turn sessions) and the
node's drain all let sessions go; they do it here, so the order of the steps
(snapshot, forget locally, destroy, release the lease) is written once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sandgrid.errors import SandgridError
from sandgrid.wire.ledger import SessionLedger
from worker.sessions.pool_protocol import SandboxPool
from worker.sessions.table import LocalSession, SessionTable
from worker.turns.snapshot_policy import Persistence

__all__ = ["Residency"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Residency:
    """The sessions of one node, on their way out.

    Attributes:
        node: the node's name (the holder of its leases).
        ledger: the session ledger (leases).
        sessions: the node's session table.
        pool: the pool the sessions' sandboxes came from (it destroys them).
        persistence: the snapshot policy (saves on release).
    """

    node: str
    ledger: SessionLedger
    sessions: SessionTable
    pool: SandboxPool
    persistence: Persistence

    def release(
        self, local: LocalSession, *, snapshot: bool, keep_on_failure: bool = False
    ) -> bool:
        """Give a session up: save it as its policy says, drop the lease, destroy.

        Args:
            local: the session.
            snapshot: save the workspace first (see ``Persistence.on_release``).
            keep_on_failure: when that save fails, keep the session here (the
                reaper tries again later) instead of losing its changes.

        Returns:
            False when the session was kept because its snapshot failed.
        """
        if snapshot:
            try:
                self.persistence.on_release(local)
            except Exception as exc:
                if isinstance(exc, SandgridError):
                    log.warning("session %s: snapshot on release failed: %s", local.session_id, exc)
                else:
                    log.exception("session %s: snapshot on release failed", local.session_id)
                if keep_on_failure:
                    return False
        self.discard(local)
        return True

    def discard(self, local: LocalSession) -> None:
        """Forget a session here: its container is destroyed, its lease released."""
        self.sessions.pop(local.session_id)
        self.pool.discard(local.sandbox)
        try:
            self.ledger.release_lease(local.session_id, self.node)
        except Exception:
            log.exception("session %s: lease release failed", local.session_id)

    def discard_here(self, session_id: str) -> None:
        """Forget a session here under its lock, if this node holds it (a close, a
        restore: what the sandbox holds since the last snapshot is not kept)."""
        local = self.sessions.get(session_id)
        if local is not None:
            with local.gate.alone():
                self.discard(local)

    def close(self, session_id: str) -> None:
        """Destroy the session's sandbox here now (no snapshot) and release its lease;
        nothing to do when this node does not hold it (already closed). Never raises:
        the turn before it has its answer already."""
        local = self.sessions.get(session_id)
        if local is None:
            return
        try:
            self.discard(local)
        except Exception:
            log.exception("session %s: close after the turn failed", session_id)
