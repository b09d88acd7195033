"""The wire models of a session's lifecycle: checkpoints, restore, pause, TTL.

A checkpoint is a snapshot of the session's workspace kept under a name until
it is deleted (retention never collects it); restoring one makes it the
session's latest snapshot, so the next turn sees that workspace (an agent's
undo); a new session can start from one (``SessionCreate.fork_from`` with
``checkpoint``). Pausing saves the workspace and gives the sandbox up; the next
turn resumes it on any worker. See docs/lifecycle.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from sandgrid.models import CHECKPOINT_NAME_PATTERN, SessionInfo, WireModel

__all__ = [
    "MAX_CHECKPOINTS",
    "MAX_FORK_COUNT",
    "CheckpointCreate",
    "CheckpointInfo",
    "CheckpointList",
    "CheckpointName",
    "ForkReply",
    "ForkRequest",
    "ForkSessionsResult",
    "PauseRequest",
    "PauseResult",
    "RestoreRequest",
    "RestoreResult",
    "check_checkpoint_name",
]

MAX_FORK_COUNT = 100
"""The most sessions one fork may make, whatever a tenant's ceiling (24.2)."""
MAX_CHECKPOINTS = 16
"""Named checkpoints a session may keep at once (a quota: delete one to add one)."""

_NAME_RE = re.compile(CHECKPOINT_NAME_PATTERN)

CheckpointName = Annotated[
    str,
    Field(
        pattern=CHECKPOINT_NAME_PATTERN,
        description="1-48 letters, digits, '_' or '-', starting with a letter or digit",
    ),
]


def check_checkpoint_name(name: str) -> bool:
    """Whether ``name`` is a valid checkpoint name (for callers outside pydantic)."""
    return bool(_NAME_RE.fullmatch(name))


class CheckpointCreate(WireModel):
    """Body of ``POST /v1/sessions/{id}/checkpoints``."""

    name: CheckpointName
    memory: bool = Field(
        False,
        description="keep the running processes and their memory too (gVisor types only; "
        "24.3, docs/memory.md): a restore brings them back, not only the files",
    )


class CheckpointInfo(WireModel):
    """One named checkpoint of a session."""

    name: str
    snapshot: str = Field(description="the snapshot it keeps (its name in the store)")
    memory: bool = Field(False, description="it keeps the processes' memory too (24.3)")
    memory_bytes: int | None = Field(None, description="the memory image's stored size")
    kind: Literal["checkpoint"] = Field("checkpoint", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class CheckpointList(WireModel):
    """Body of ``GET /v1/sessions/{id}/checkpoints``: sorted by name."""

    checkpoints: list[CheckpointInfo]
    kind: Literal["list_checkpoints"] = Field("list_checkpoints", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class RestoreRequest(WireModel):
    """Body of ``POST /v1/sessions/{id}/restore``."""

    checkpoint: CheckpointName


class RestoreResult(WireModel):
    """The session's workspace is now the checkpoint's; the next turn sees it."""

    session: str
    checkpoint: str
    snapshot: str = Field(description="the session's new latest snapshot")
    kind: Literal["restore"] = Field("restore", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class ForkRequest(WireModel):
    """Body of ``POST /v1/sessions/{id}/fork`` (24.2): N new sessions from this one."""

    count: int = Field(
        1,
        ge=1,
        le=MAX_FORK_COUNT,
        description="how many sessions (at most the tenant's max_fork_count, 32 by default)",
    )
    memory: bool = Field(
        False,
        description="each fork carries on the source's running processes and memory "
        "(gVisor types only; docs/memory.md); the source keeps running",
    )


class ForkSessionsResult(WireModel):
    """What the source's worker saved for the forks (the route answers ``ForkReply``)."""

    snapshots: dict[str, str] = Field(description="per fork, its copy of the workspace")
    memory: bool = Field(False, description="each fork has a memory image")
    memory_bytes: int | None = Field(None, description="one image's stored size")
    memory_new_bytes: int | None = Field(None, description="stored bytes the fork uploaded")
    memory_ms: dict[str, float] = Field(default_factory=dict)
    memory_reason: str | None = Field(None, description="memory asked and not saved: why")
    kind: Literal["fork_sessions"] = Field("fork_sessions", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class ForkReply(WireModel):
    """Answer of ``POST /v1/sessions/{id}/fork``: the new sessions, each with its own
    copy of the workspace and (``memory``) its own memory image, restored by its
    first turn on whichever node takes it."""

    sessions: list[SessionInfo]
    memory: bool = False
    memory_bytes: int | None = None
    memory_new_bytes: int | None = None
    memory_ms: dict[str, float] = Field(default_factory=dict)
    memory_reason: str | None = None


class PauseRequest(WireModel):
    """Body of ``POST /v1/sessions/{id}/pause`` (absent or ``{}``: the workspace alone)."""

    memory: bool = Field(
        False,
        description="save the running processes and their memory too (gVisor types only; "
        "docs/memory.md): the next turn, on any node, carries on where they were",
    )


class PauseResult(WireModel):
    """The session holds no sandbox now; its next turn resumes it on any worker."""

    session: str
    snapshot: str | None = Field(description="its latest snapshot (None: nothing saved yet)")
    released: bool = Field(description="a sandbox was given up (False: none was held)")
    memory: bool = Field(False, description="a memory image was saved beside the snapshot")
    memory_bytes: int | None = Field(None, description="the memory image's stored size")
    memory_raw_bytes: int | None = Field(None, description="its size before compression")
    memory_new_bytes: int | None = Field(
        None, description="stored bytes this pause uploaded (chunks the store lacked: 24.4)"
    )
    memory_ms: dict[str, float] = Field(
        default_factory=dict, description="checkpoint_ms, store_ms (pack and upload)"
    )
    memory_reason: str | None = Field(
        None, description="asked for memory and none was saved: why (the workspace was)"
    )
    kind: Literal["pause"] = Field("pause", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""
