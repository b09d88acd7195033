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
  With ``memory`` the sandbox is checkpointed first (``worker.turns.memory``):
  the next turn resumes its processes too.
"""

from __future__ import annotations

from sandgrid.lifecycle import CheckpointInfo, CheckpointList, PauseResult, RestoreResult
from sandgrid.ops.lifecycle import (
    CheckpointOp,
    DropCheckpointOp,
    DropCheckpointResult,
    ListCheckpointsOp,
    PauseOp,
    RestoreOp,
)
from worker.ops.base import NodeHandler, NodeParts, TurnContext
from worker.sessions.table import LocalSession
from worker.snapshots import checkpoints
from worker.turns import memory

__all__ = ["HANDLERS"]


def _list(ctx: TurnContext, op: ListCheckpointsOp) -> CheckpointList:
    info = ctx.session
    found = checkpoints.checkpoints(ctx.parts.persistence.store, info.tenant, info.id)
    return CheckpointList(
        checkpoints=[CheckpointInfo(name=n, snapshot=s) for n, s in found.items()]
    )


def _drop(ctx: TurnContext, op: DropCheckpointOp) -> DropCheckpointResult:
    info = ctx.session
    checkpoints.delete(ctx.parts.persistence.store, info.tenant, info.id, op.name)
    return DropCheckpointResult(deleted=op.name)


def _checkpoint(ctx: TurnContext, op: CheckpointOp) -> CheckpointInfo:
    info = ctx.session
    _save(ctx.parts, info.id)
    ref = checkpoints.create(ctx.parts.persistence.store, info.tenant, info.id, op.name)
    return CheckpointInfo(name=op.name, snapshot=ref.name)


def _restore(ctx: TurnContext, op: RestoreOp) -> RestoreResult:
    info, parts = ctx.session, ctx.parts
    parts.residency.discard_here(info.id)
    ref = checkpoints.restore(parts.persistence.store, info.tenant, info.id, op.checkpoint)
    parts.ledger.update(info.id, snapshot=ref.name, unsaved=False, last_turn=ctx.turn_id)
    return RestoreResult(session=info.id, checkpoint=op.checkpoint, snapshot=ref.name)


def _pause(ctx: TurnContext, op: PauseOp) -> PauseResult:
    session_id, parts = ctx.session.id, ctx.parts
    if op.memory and (local := parts.sessions.get(session_id)) is not None:
        memory.check_savable(parts.backend_for(local.sandbox_type), local.sandbox)
    local = _save(parts, session_id)
    if local is None:
        reason = "no sandbox is held: nothing runs to save" if op.memory else None
        return PauseResult(
            session=session_id, snapshot=ctx.session.snapshot, released=False, memory_reason=reason
        )
    with local.gate.alone():
        try:
            if op.memory:
                backend = parts.backend_for(local.sandbox_type)
                return memory.pause(parts.ledger, parts.persistence.store, backend, local)
        finally:
            parts.residency.discard(local)
    return PauseResult(session=session_id, snapshot=local.snapshot, released=True)


def _save(parts: NodeParts, session_id: str) -> LocalSession | None:
    """Save the resident sandbox's unsaved changes, whatever its policy."""
    local = parts.sessions.get(session_id)
    if local is None:
        return None
    with local.gate.alone():
        if local.dirty:
            parts.persistence.save(local)
            parts.ledger.update(session_id, snapshot=local.snapshot, unsaved=False)
    return local


HANDLERS = (
    NodeHandler(ListCheckpointsOp, _list),
    NodeHandler(DropCheckpointOp, _drop),
    NodeHandler(CheckpointOp, _checkpoint),
    NodeHandler(RestoreOp, _restore),
    NodeHandler(PauseOp, _pause),
)
"""The lifecycle family's handlers: none needs the sandbox (a resident one is used
when it is here)."""
