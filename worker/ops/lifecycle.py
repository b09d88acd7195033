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
- fork_sessions (24.2): the workspace is saved and copied into each new
  session; with ``memory`` the sandbox is checkpointed once, left running,
  and each fork gets its own image (``worker.turns.memory_copies``);
- a checkpoint with ``memory`` keeps an image of the running sandbox with it,
  and its restore hands that image to the session's next turn (24.3).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from sandgrid.errors import Conflict, ErrorCode, InvalidInput
from sandgrid.lifecycle import (
    CheckpointInfo,
    CheckpointList,
    ForkSessionsResult,
    PauseResult,
    RestoreResult,
)
from sandgrid.ops.lifecycle import (
    CheckpointOp,
    DropCheckpointOp,
    DropCheckpointResult,
    ForkSessionsOp,
    ListCheckpointsOp,
    PauseOp,
    RestoreOp,
)
from worker.ops.base import NodeHandler, NodeParts, TurnContext
from worker.sessions.table import LocalSession
from worker.snapshots import checkpoints
from worker.turns import memory, memory_copies, memory_stage

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
    memory_copies.drop_checkpoint_memory(ctx.parts.persistence.store, info.tenant, info.id, op.name)
    return DropCheckpointResult(deleted=op.name)


def _checkpoint(ctx: TurnContext, op: CheckpointOp) -> CheckpointInfo:
    info, parts = ctx.session, ctx.parts
    local = parts.sessions.get(info.id)
    if op.memory:
        if local is None:
            raise InvalidInput(
                "memory: the session holds no running sandbox to keep; run a turn first",
                operation="checkpoints.create",
                context={"field": "memory", "rule": "a running session"},
            )
        memory.check_savable(parts.backend_for(local.sandbox_type), local.sandbox)
    _save(parts, info.id)
    store = parts.persistence.store
    ref = checkpoints.create(store, info.tenant, info.id, op.name)
    if not op.memory or local is None:
        return CheckpointInfo(name=op.name, snapshot=ref.name)
    with local.gate.alone():
        backend = parts.backend_for(local.sandbox_type)
        saved = memory_copies.checkpoint_memory(store, backend, local, op.name, ref.name)
    if not saved.images:  # the workspace checkpoint stands; the memory is not kept: say so
        checkpoints.delete(store, info.tenant, info.id, op.name)
        raise Conflict(
            f"memory: the sandbox could not be saved ({saved.reason}); the checkpoint was not kept",
            code=ErrorCode.MEMORY_UNSAVABLE,
            operation="checkpoints.create",
            context={"cause": "checkpoint_failed"},
        )
    stored = saved.images[info.id]
    return CheckpointInfo(
        name=op.name, snapshot=ref.name, memory=True, memory_bytes=stored.stored_bytes
    )


def _restore(ctx: TurnContext, op: RestoreOp) -> RestoreResult:
    info, parts = ctx.session, ctx.parts
    parts.residency.discard_here(info.id)
    store = parts.persistence.store
    ref = checkpoints.restore(store, info.tenant, info.id, op.checkpoint)
    parts.ledger.update(
        info.id, snapshot=ref.name, unsaved=False, last_turn=ctx.turn_id, memory_image=None
    )
    backend = parts.backend_for(info.type)
    memory_copies.restore_memory(parts.ledger, store, backend, info, op.checkpoint, ref.name)
    return RestoreResult(session=info.id, checkpoint=op.checkpoint, snapshot=ref.name)


def _fork_sessions(ctx: TurnContext, op: ForkSessionsOp) -> ForkSessionsResult:
    info, parts = ctx.session, ctx.parts
    local = parts.sessions.get(info.id)
    if op.memory and local is not None:
        memory.check_savable(parts.backend_for(local.sandbox_type), local.sandbox)
    local = _save(parts, info.id)
    store = parts.persistence.store
    gate: AbstractContextManager[object] = local.gate.alone() if local else nullcontext()
    with gate:
        snapshots = memory_copies.fork_snapshots(store, info.tenant, info.id, op.targets)
        for sid, snap in snapshots.items():
            parts.ledger.update(sid, snapshot=snap, last_turn=ctx.turn_id)
        done = ForkSessionsResult(snapshots={k: v for k, v in snapshots.items() if v})
        if not op.memory:
            return done
        backend = parts.backend_for(info.type)
        saved = memory_copies.fork_memory(parts.ledger, store, backend, info, local, snapshots)
    if not saved.images:
        return done.model_copy(update={"memory_reason": saved.reason})
    one = next(iter(saved.images.values()))
    return done.model_copy(
        update={
            "memory": True,
            "memory_bytes": one.stored_bytes,
            "memory_new_bytes": sum(s.new_bytes for s in saved.images.values()),
            "memory_ms": saved.ms,
        }
    )


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
                store = parts.persistence.store
                return memory_stage.pause(ctx.node, parts.ledger, store, backend, local)
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
    NodeHandler(ForkSessionsOp, _fork_sessions),
)
"""The lifecycle family's handlers: none needs the sandbox (a resident one is used
when it is here)."""
