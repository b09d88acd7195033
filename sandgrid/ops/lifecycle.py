"""The lifecycle ops of a session: checkpoints, restore, pause (see ``sandgrid.lifecycle``).

They run on the session's owner while its lease lives, else on any worker of
its type (operations on the snapshot store alone). Their results are the
public models of ``sandgrid.lifecycle`` (``CheckpointInfo``, ``CheckpointList``,
``RestoreResult``, ``PauseResult``) but for a dropped checkpoint's, defined here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.lifecycle import MAX_FORK_COUNT, CheckpointName
from sandgrid.models import SessionId, WireModel

__all__ = [
    "LIFECYCLE_OPS",
    "CheckpointOp",
    "DropCheckpointOp",
    "DropCheckpointResult",
    "ForkSessionsOp",
    "ListCheckpointsOp",
    "PauseOp",
    "RestoreOp",
]


class CheckpointOp(WireModel):
    """Save the workspace if it changed, then keep the latest snapshot as ``name``.

    Answers ``CheckpointInfo``.
    """

    kind: Literal["checkpoint"] = "checkpoint"
    name: CheckpointName
    memory: bool = False
    """Keep the sandbox's memory with it (24.3; ``CheckpointCreate.memory``)."""


class ListCheckpointsOp(WireModel):
    """The session's checkpoints; answers ``CheckpointList``."""

    kind: Literal["list_checkpoints"] = "list_checkpoints"


class DropCheckpointOp(WireModel):
    """Delete checkpoint ``name`` (``not_found`` if there is none)."""

    kind: Literal["drop_checkpoint"] = "drop_checkpoint"
    name: CheckpointName


class DropCheckpointResult(WireModel):
    """The checkpoint that was deleted (the route answers 204, no body)."""

    kind: Literal["drop_checkpoint"] = Field("drop_checkpoint", exclude=True, repr=False)
    deleted: str


class RestoreOp(WireModel):
    """Make checkpoint ``checkpoint`` the latest snapshot; drop the resident sandbox
    (its unsaved changes are what an undo discards), so the next turn restores it.

    Answers ``RestoreResult``.
    """

    kind: Literal["restore"] = "restore"
    checkpoint: CheckpointName


class PauseOp(WireModel):
    """Save the workspace (whatever the policy) and give the sandbox up; answers ``PauseResult``."""

    kind: Literal["pause"] = "pause"
    memory: bool = False
    """Checkpoint the sandbox's memory too (issue 24; ``PauseRequest.memory``)."""


class ForkSessionsOp(WireModel):
    """A turn of the source: copy its workspace into each of ``targets`` (new
    sessions of the same tenant and type, made by the API) and, with ``memory``,
    checkpoint it once leaving it running and give each its own memory image
    (24.2). Answers ``ForkResult``."""

    kind: Literal["fork_sessions"] = "fork_sessions"
    targets: list[SessionId] = Field(min_length=1, max_length=MAX_FORK_COUNT)
    memory: bool = False


LIFECYCLE_OPS = (
    CheckpointOp,
    ListCheckpointsOp,
    DropCheckpointOp,
    RestoreOp,
    PauseOp,
    ForkSessionsOp,
)
"""The ops ``worker.ops.lifecycle`` runs: on the owner, else on any worker, with no sandbox."""
