"""The ops on a session's record rather than its sandbox: close and fork.

Neither needs a sandbox: a close destroys the session's sandbox where it is
resident and deletes its snapshots; a fork copies a snapshot in the store.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.lifecycle import CheckpointName
from sandgrid.models import SessionId, WireModel

__all__ = ["CloseOp", "CloseResult", "ForkOp", "ForkResult"]


class CloseOp(WireModel):
    """The session was closed: destroy its sandbox and delete its snapshots.

    Sent to the owner's direct queue when a node holds the session, else to the
    shared queue of its type (any worker can delete snapshots).
    """

    kind: Literal["close"] = "close"


class CloseResult(WireModel):
    """The session's sandbox is gone here, and how many of its snapshots were deleted."""

    kind: Literal["close"] = Field("close", exclude=True, repr=False)
    closed: bool = True
    snapshots_deleted: int = 0


class ForkOp(WireModel):
    """Start this (new) session from the latest snapshot of ``source``, a session
    of the same tenant: the snapshot store copies the manifest and shares the blobs,
    so the fork outlives its source. No sandbox is needed."""

    kind: Literal["fork"] = "fork"
    source: SessionId
    checkpoint: CheckpointName | None = None
    """Fork that named checkpoint of ``source`` instead of its latest snapshot."""


class ForkResult(WireModel):
    """The new session's first snapshot (a copy of the source's) and its source."""

    kind: Literal["fork"] = Field("fork", exclude=True, repr=False)
    snapshot: str
    forked_from: str
