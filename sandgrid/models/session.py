"""A session: the body that creates it, the record the registry keeps, the listing."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, model_validator

from sandgrid.models.base import (
    CHECKPOINT_NAME_PATTERN,
    MAX_ENV_BYTES,
    MAX_ENV_ENTRIES,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_RECORD_BYTES,
    MAX_TTL_S,
    EnvVars,
    IdleAction,
    LabelMap,
    SandboxTypeName,
    SessionId,
    SessionState,
    SnapshotPolicy,
    WireModel,
)
from sandgrid.models.files import FileWrite
from sandgrid.models.network import NetworkPolicy
from sandgrid.models.quotas import Quotas

__all__ = ["SessionCreate", "SessionInfo", "SessionList"]


class SessionCreate(WireModel):
    """Body of ``POST /v1/sessions``."""

    type: SandboxTypeName = "python"
    quotas: Quotas = Field(default_factory=Quotas)
    env: EnvVars = Field(
        default_factory=dict,
        description=f"at most {MAX_ENV_ENTRIES} variables, {MAX_ENV_BYTES} bytes of NAME=VALUE",
    )
    files: list[FileWrite] = Field(default_factory=list, max_length=1024)
    snapshot_policy: SnapshotPolicy = Field(
        "after_turn",
        description="when the workspace is saved: after_turn (every turn that may have "
        "changed it, before the turn returns), on_idle (when the session's sandbox is "
        "released: idle, or the node drains), never (it lives only in its sandbox)",
    )
    on_idle: IdleAction = Field(
        "release",
        description="what an idle session's sandbox becomes: release (its workspace is "
        "saved, its processes end) or memory (paused with its processes, gVisor types "
        "only: docs/memory.md)",
    )
    fork_from: SessionId | None = Field(
        None,
        description="start from the latest snapshot of this session of the same tenant",
    )
    labels: LabelMap = Field(
        default_factory=dict,
        description=f"at most {MAX_LABELS}; keys 1-63 of A-Z a-z 0-9 . _ - /, "
        f"values at most {MAX_LABEL_VALUE} characters",
    )
    checkpoint: str | None = Field(
        None,
        pattern=CHECKPOINT_NAME_PATTERN,
        description="with fork_from: start from this named checkpoint of it instead",
    )
    idle_timeout_s: int | None = Field(
        None,
        ge=1,
        le=MAX_TTL_S,
        description="close the session (state expired) after this many seconds without a turn",
    )
    max_lifetime_s: int | None = Field(
        None,
        ge=1,
        le=MAX_TTL_S,
        description="close the session (state expired) this many seconds after it was created",
    )

    @model_validator(mode="after")
    def _checkpoint_needs_fork_from(self) -> SessionCreate:
        if self.checkpoint is not None and self.fork_from is None:
            raise ValueError("checkpoint: needs fork_from (the session the checkpoint is of)")
        return self

    @model_validator(mode="after")
    def _record_bounded(self) -> SessionCreate:
        """The record is in every listing and every turn's message: bound it whole."""
        size = len(self.model_dump_json(exclude={"files"}).encode())
        if size > MAX_RECORD_BYTES:
            raise ValueError(
                f"the session record (every field but files, as JSON) is {size} bytes; "
                f"at most {MAX_RECORD_BYTES} are allowed"
            )
        return self

    network: NetworkPolicy | None = Field(
        None, description="egress policy; None: the type's or tenant's default, else offline"
    )


class SessionInfo(WireModel):
    """A session as the registry holds it and the API shows it."""

    id: str
    tenant: str
    type: str
    quotas: Quotas
    env: dict[str, str] = Field(default_factory=dict)
    snapshot_policy: SnapshotPolicy = "after_turn"
    state: SessionState = "new"
    owner: str | None = None
    lease_expires: float | None = None
    snapshot: str | None = None
    unsaved: bool = Field(
        False,
        description="the workspace has changes that no snapshot holds (policy on_idle or "
        "never, or the last snapshot failed): a worker loss would lose them",
    )
    forked_from: str | None = None
    turns: int = 0
    last_turn: str | None = None
    created_at: datetime
    last_used: datetime
    labels: dict[str, str] = Field(default_factory=dict)
    idle_timeout_s: int | None = None
    expires_at: datetime | None = Field(None, description="the absolute deadline, if any")
    expired_at: datetime | None = Field(None, description="when its TTL closed it")
    network: NetworkPolicy | None = None
    # Memory snapshots (issue 24, docs/memory.md).
    memory_image: str | None = Field(
        None,
        description="the memory image a pause with memory saved (its sha256): the next "
        "turn restores the processes from it, once",
    )
    memory_staged_on: str | None = Field(
        None,
        description="the node that staged memory_image ahead (fetched and verified it): "
        "while it lives, the next turn goes there and the resume skips the fetch",
    )
    memory_restored: bool | None = Field(
        None,
        description="the last resume from a memory image: true it came back, false the "
        "session fell back to its workspace snapshot (memory_reason says why)",
    )
    memory_reason: str | None = Field(None, description="why memory_restored is false")
    on_idle: IdleAction = "release"
    port_url_epochs: dict[str, int] = Field(
        default_factory=dict,
        description="preview URLs' revocation epochs ('*': every port, else by port): "
        "DELETE /v1/sessions/{id}/ports/urls raises one, and URLs made before answer 403",
    )


class SessionList(WireModel):
    """Body of ``GET /v1/sessions``: the tenant's sessions that are not closed."""

    sessions: list[SessionInfo]
