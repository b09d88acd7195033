"""The lifecycle ops of one session on this node: checkpoint, restore, pause.

They run on the session's owner while its lease lives (the scheduler routes
them there, under the session's turn lock, like any turn), else on any worker
of the type: with no sandbox resident, they are operations on the snapshot
store alone (``worker.snapshots.checkpoints``).

- checkpoint: the resident sandbox's unsaved changes are saved first (whatever
  the policy), so the checkpoint is the workspace as the caller last saw it;
- restore: the checkpoint becomes the latest snapshot, and the resident
  sandbox (if any) is destroyed without a save, so the next turn restores it
  on any worker: undo means the changes since are gone;
- pause: the workspace is saved (whatever the policy) and the sandbox given up
  (``Residency.discard``); the next turn resumes from that snapshot anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandgrid.errors import SandgridError
from sandgrid.wire.jobs import (
    CheckpointOp,
    DropCheckpointOp,
    ListCheckpointsOp,
    PauseOp,
    RestoreOp,
    TurnJob,
)
from sandgrid.wire.ledger import SessionLedger
from worker.persistence import Persistence
from worker.residency import Residency
from worker.sessions.table import LocalSession, SessionTable
from worker.snapshots import checkpoints

__all__ = ["SessionLifecycle"]


@dataclass(frozen=True)
class SessionLifecycle:
    """Runs the lifecycle ops (``sandgrid.wire.jobs.LIFECYCLE_OPS``) of this node.

    Attributes:
        ledger: the session ledger (the session's latest snapshot).
        sessions: the node's session table (the resident sandbox, if any).
        residency: how a sandbox is given up.
        persistence: the snapshot policy and store.
    """

    ledger: SessionLedger
    sessions: SessionTable
    residency: Residency
    persistence: Persistence

    def apply(self, job: TurnJob) -> dict[str, Any]:
        """Run a lifecycle op; its JSON result.

        Raises:
            SandgridError: the op failed (a bad name, a quota, a missing checkpoint...).
        """
        op, info = job.op, job.session
        store = self.persistence.store
        if isinstance(op, ListCheckpointsOp):
            found = checkpoints.checkpoints(store, info.tenant, info.id)
            return {"checkpoints": [{"name": n, "snapshot": s} for n, s in found.items()]}
        if isinstance(op, DropCheckpointOp):
            checkpoints.delete(store, info.tenant, info.id, op.name)
            return {"deleted": op.name}
        if isinstance(op, CheckpointOp):
            self._save(info.id)
            ref = checkpoints.create(store, info.tenant, info.id, op.name)
            return {"name": op.name, "snapshot": ref.name}
        if isinstance(op, RestoreOp):
            local = self.sessions.get(info.id)
            if local is not None:
                with local.lock:
                    self.residency.discard(local)
            ref = checkpoints.restore(store, info.tenant, info.id, op.checkpoint)
            self.ledger.update(info.id, snapshot=ref.name, unsaved=False, last_turn=job.turn_id)
            return {"session": info.id, "checkpoint": op.checkpoint, "snapshot": ref.name}
        if isinstance(op, PauseOp):
            return self._pause(info.id, info.snapshot)
        raise SandgridError(f"not a lifecycle op: {op.kind}")

    def _save(self, session_id: str) -> LocalSession | None:
        """Save the resident sandbox's unsaved changes, whatever its policy."""
        local = self.sessions.get(session_id)
        if local is None:
            return None
        with local.lock:
            if local.dirty:
                self.persistence.save(local)
                self.ledger.update(session_id, snapshot=local.snapshot, unsaved=False)
        return local

    def _pause(self, session_id: str, snapshot: str | None) -> dict[str, Any]:
        local = self._save(session_id)
        if local is None:
            return {"session": session_id, "snapshot": snapshot, "released": False}
        with local.lock:
            self.residency.discard(local)
        return {"session": session_id, "snapshot": local.snapshot, "released": True}
