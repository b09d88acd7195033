"""The Celery message of one turn and its result: what the control plane asks of a worker.

A ``TurnJob`` carries the session record and one operation (a ``kind``-tagged
union); the worker answers a ``TurnOutcome``: a result or an error body, never
both. Both are JSON on the wire (never pickle) and frozen like every wire model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from sandgrid.lifecycle import CheckpointName
from sandgrid.models import (
    MAX_FILE_BYTES,
    CodeRequest,
    ExecRequest,
    FileWrite,
    SessionId,
    SessionInfo,
    WireModel,
    WorkspacePath,
)
from sandgrid.terminal import (
    PTY_DEFAULT_COLS,
    PTY_DEFAULT_IDLE_S,
    PTY_DEFAULT_MAX_S,
    PTY_DEFAULT_ROWS,
    PTY_MAX_DIM,
    PTY_MAX_IDLE_S,
    PTY_MAX_S,
)

__all__ = [
    "LIFECYCLE_OPS",
    "CheckpointOp",
    "CloseOp",
    "DeleteOp",
    "DropCheckpointOp",
    "ExecOp",
    "ForkOp",
    "ListCheckpointsOp",
    "ListOp",
    "PauseOp",
    "ProcOp",
    "ProcStartOp",
    "PtyOp",
    "ReadOp",
    "RestoreOp",
    "RunCodeOp",
    "TarDownloadOp",
    "TarUploadOp",
    "TurnJob",
    "TurnOp",
    "TurnOutcome",
    "WriteOp",
]


# ---- turn operations: what a worker is asked to do for a session ----------


class ExecOp(WireModel):
    kind: Literal["exec"] = "exec"
    request: ExecRequest


class WriteOp(WireModel):
    kind: Literal["write"] = "write"
    files: list[FileWrite] = Field(min_length=1, max_length=1024)


class ReadOp(WireModel):
    kind: Literal["read"] = "read"
    path: WorkspacePath
    encoding: Literal["utf-8", "base64"] = "utf-8"


class ListOp(WireModel):
    kind: Literal["list"] = "list"
    path: WorkspacePath = "."
    recursive: bool = False


class DeleteOp(WireModel):
    kind: Literal["delete"] = "delete"
    path: WorkspacePath
    recursive: bool = False


class TarUploadOp(WireModel):
    kind: Literal["tar_upload"] = "tar_upload"
    path: WorkspacePath = "."
    data_b64: str = Field(max_length=MAX_FILE_BYTES * 4)


class TarDownloadOp(WireModel):
    kind: Literal["tar_download"] = "tar_download"
    path: WorkspacePath = "."


class CloseOp(WireModel):
    """The session was closed: destroy its sandbox and delete its snapshots.

    Sent to the owner's direct queue when a node holds the session, else to the
    shared queue of its type (any worker can delete snapshots).
    """

    kind: Literal["close"] = "close"


class ForkOp(WireModel):
    """Start this (new) session from the latest snapshot of ``source``, a session
    of the same tenant: the snapshot store copies the manifest and shares the blobs,
    so the fork outlives its source. No sandbox is needed."""

    kind: Literal["fork"] = "fork"
    source: SessionId
    checkpoint: CheckpointName | None = None
    """Fork that named checkpoint of ``source`` instead of its latest snapshot."""


# ---- the session's lifecycle (see sandgrid.lifecycle): on the owner, else any worker


class CheckpointOp(WireModel):
    """Save the workspace if it changed, then keep the latest snapshot as ``name``."""

    kind: Literal["checkpoint"] = "checkpoint"
    name: CheckpointName


class ListCheckpointsOp(WireModel):
    kind: Literal["list_checkpoints"] = "list_checkpoints"


class DropCheckpointOp(WireModel):
    kind: Literal["drop_checkpoint"] = "drop_checkpoint"
    name: CheckpointName


class RestoreOp(WireModel):
    """Make checkpoint ``checkpoint`` the latest snapshot; drop the resident sandbox
    (its unsaved changes are what an undo discards), so the next turn restores it."""

    kind: Literal["restore"] = "restore"
    checkpoint: CheckpointName


class PauseOp(WireModel):
    """Save the workspace (whatever the policy) and give the sandbox up."""

    kind: Literal["pause"] = "pause"


LIFECYCLE_OPS = (CheckpointOp, ListCheckpointsOp, DropCheckpointOp, RestoreOp, PauseOp)


class RunCodeOp(WireModel):
    """Run code in the session's Jupyter kernel (started in the sandbox on first use)."""

    kind: Literal["run_code"] = "run_code"
    request: CodeRequest


class PtyOp(WireModel):
    """An interactive terminal: a login shell on a pty, a long turn of the session.

    Output and input travel on the Redis Streams of ``names.pty_out_key`` and
    ``names.pty_in_key`` of ``pty_id`` (the turn's id), not in the job or outcome;
    the turn ends when the shell exits, on close, or at its idle or absolute limit.
    """

    kind: Literal["pty"] = "pty"
    pty_id: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$")
    rows: int = Field(PTY_DEFAULT_ROWS, ge=1, le=PTY_MAX_DIM)
    cols: int = Field(PTY_DEFAULT_COLS, ge=1, le=PTY_MAX_DIM)
    term: str = Field("xterm-256color", pattern=r"^[A-Za-z0-9._+-]{1,64}$")
    idle_s: float = Field(PTY_DEFAULT_IDLE_S, gt=0, le=PTY_MAX_IDLE_S)
    max_s: float = Field(PTY_DEFAULT_MAX_S, gt=0, le=PTY_MAX_S)


class ProcStartOp(WireModel):
    """Start ``request`` as a background process in the session's sandbox; answer at once."""

    kind: Literal["proc_start"] = "proc_start"
    request: ExecRequest


class ProcOp(WireModel):
    """A quick op on the background processes of the session's sandbox.

    Never starts a sandbox: when the session is not here, or its sandbox is not
    ``sandbox`` (the handle's), the worker answers ``process_lost``.
    """

    kind: Literal["proc"] = "proc"
    action: Literal["list", "logs", "stdin", "kill", "wait"]
    pid: int | None = None
    sandbox: str | None = None
    since: int = Field(0, ge=0)
    data: str = ""
    eof: bool = False
    signal: str = "TERM"
    timeout_s: float = Field(0.0, ge=0)


TurnOp = Annotated[
    ExecOp
    | WriteOp
    | ReadOp
    | ListOp
    | DeleteOp
    | TarUploadOp
    | TarDownloadOp
    | CloseOp
    | ForkOp
    | RunCodeOp
    | PtyOp
    | CheckpointOp
    | ListCheckpointsOp
    | DropCheckpointOp
    | RestoreOp
    | PauseOp
    | ProcStartOp
    | ProcOp,
    Field(discriminator="kind"),
]


class TurnJob(WireModel):
    """The Celery message of one turn: everything a worker needs, nothing secret."""

    turn_id: str
    attempt: int = 1
    session: SessionInfo
    op: TurnOp
    batch: bool = False
    close_after: bool = Field(
        False,
        description="destroy the session's sandbox right after this turn, without a "
        "snapshot: a batch job's one-turn session (the scheduler closes the record)",
    )


class TurnOutcome(WireModel):
    """The Celery result of one turn: a result, or an error body, never both."""

    turn_id: str
    node: str
    ok: bool
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    snapshot: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)
