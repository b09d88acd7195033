"""The ops of a session's record on this node: close and fork. Neither needs a sandbox.

- close: the session's sandbox here (if any) is destroyed, its lease released,
  and its snapshots deleted (the blobs when collection finds nothing refers to
  them: a fork shares them). Sent to the owner while it holds the session,
  else to any worker of the type: any worker can delete snapshots.
- fork: the latest snapshot of the source session (or one of its named
  checkpoints) is copied in the store into the new session; the copy shares
  the blobs, so the fork outlives its source.
"""

from __future__ import annotations

from sandgrid.ops.session import CloseOp, CloseResult, ForkOp, ForkResult
from worker.ops.base import NodeHandler, TurnContext

__all__ = ["HANDLERS"]


def _close(ctx: TurnContext, op: CloseOp) -> CloseResult:
    info, parts = ctx.session, ctx.parts
    parts.residency.discard_here(info.id)
    deleted = parts.persistence.forget(info.tenant, info.id)
    return CloseResult(snapshots_deleted=deleted)


def _fork(ctx: TurnContext, op: ForkOp) -> ForkResult:
    return ctx.parts.persistence.fork(ctx.job)


HANDLERS = (NodeHandler(CloseOp, _close), NodeHandler(ForkOp, _fork))
"""The session family's handlers."""
