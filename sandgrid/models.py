"""Wire models: one definition for the API, the SDK, Celery messages and the worker.

Every model that crosses HTTP, Celery or Redis is frozen and carries
``v`` (the wire version). Variants are ``kind: Literal[...]`` discriminated
unions. Validation errors name the field and the rule; they surface as 422 with
code ``invalid_input`` (see ``sandgrid.errors``).
"""

from __future__ import annotations

import base64
import posixpath
import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from sandgrid.network import parse_entries

__all__ = [
    "CHECKPOINT_NAME_PATTERN",
    "DEFAULT_OUTPUT_CAP",
    "IDEMPOTENCY_HEADER",
    "LABEL_KEY_PATTERN",
    "MAX_ENV_BYTES",
    "MAX_ENV_ENTRIES",
    "MAX_FILE_BYTES",
    "MAX_LABELS",
    "MAX_LABEL_VALUE",
    "MAX_NETWORK_BYTES",
    "MAX_NETWORK_ENTRIES",
    "MAX_RECORD_BYTES",
    "MAX_SOURCE_BYTES",
    "MAX_TTL_S",
    "NEXT_OFFSET_HEADER",
    "WIRE_VERSION",
    "WORKSPACE",
    "CodeError",
    "CodeRequest",
    "CodeResult",
    "EgressLimits",
    "EmptyBody",
    "EnvVars",
    "ExecRequest",
    "ExecResult",
    "FileEntry",
    "FileList",
    "FileRead",
    "FileWrite",
    "IdleAction",
    "LabelMap",
    "NetworkAttempt",
    "NetworkPolicy",
    "NetworkView",
    "Quotas",
    "SandboxTypeName",
    "SaveError",
    "SessionCreate",
    "SessionId",
    "SessionInfo",
    "SessionList",
    "SessionState",
    "SnapshotPolicy",
    "WireModel",
    "WorkspacePath",
    "env_bytes",
    "workspace_path",
]

WIRE_VERSION = 1
WORKSPACE = "/workspace"
#: The request header of an exec's idempotency key (the API and the SDK agree on it).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: Header of ``GET /v1/batches/{id}/results``: the offset after the lines returned.
NEXT_OFFSET_HEADER = "X-Sandgrid-Next-Offset"
DEFAULT_OUTPUT_CAP = 1 << 20  # 1 MiB per stream
MAX_FILE_BYTES = 16 << 20  # one file through the JSON API
MAX_SOURCE_BYTES = 1 << 20  # command / python source / stdin
MAX_ENV_ENTRIES = 128
MAX_ENV_BYTES = 32 << 10
"""The bytes of every ``NAME=VALUE`` of an env, together (UTF-8): 32 KiB."""
MAX_NETWORK_ENTRIES = 256
MAX_NETWORK_BYTES = 32 << 10
"""A network policy as JSON: 32 KiB."""
MAX_LABELS = 64
MAX_LABEL_VALUE = 256
"""The longest label value, in characters (no control characters)."""
LABEL_KEY_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$"
"""A label key: 1-63 letters, digits, ``.``, ``_``, ``-`` or ``/``, alphanumeric at both ends."""
MAX_RECORD_BYTES = 64 << 10
"""A session's record as the caller sets it (``SessionCreate`` but ``files``), as JSON: 64 KiB.

The record is in every ``GET /v1/sessions`` and in every turn's message.
"""

SandboxTypeName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")]
SessionId = Annotated[str, Field(pattern=r"^s-[A-Za-z0-9_-]{16,64}$")]
SnapshotPolicy = Literal["after_turn", "on_idle", "never"]
IdleAction = Literal["release", "memory"]
"""What the reaper does with an idle session (issue 24): release it, or pause it with memory."""
SessionState = Literal["new", "live", "idle", "busy", "closed", "lost", "expired"]
"""``expired``: closed by its TTL (``idle_timeout_s``, ``max_lifetime_s``); shown by the API."""
CHECKPOINT_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$"
"""A checkpoint's name: 1-48 letters, digits, ``_`` or ``-``, starting alphanumeric."""
MAX_TTL_S = 30 * 86400
"""The longest idle timeout or lifetime a session may ask for: 30 days."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_LABEL_KEY = re.compile(LABEL_KEY_PATTERN)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class WireModel(BaseModel):
    """Base of every model that crosses a wire: frozen, no unknown fields.

    A validation error's text never quotes the input (``hide_input_in_errors``):
    a logged traceback of a bad reply would carry a tenant's output (issue 23,
    item 5). ``errors()`` still names each field and rule.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    v: int = WIRE_VERSION


def workspace_path(raw: str) -> str:
    """Normalise a path inside ``/workspace`` to a relative POSIX path.

    Raises:
        ValueError: the path is empty, has a NUL byte, or leaves the workspace
            (``..``, or an absolute path that is not under ``/workspace``).
    """
    if not raw or "\x00" in raw:
        raise ValueError(f"path {raw!r} must be non-empty and contain no NUL byte")
    if raw.startswith("/"):
        if raw != WORKSPACE and not raw.startswith(WORKSPACE + "/"):
            raise ValueError(
                f"path {raw!r} leaves the workspace: absolute paths must be under /workspace"
            )
        raw = raw[len(WORKSPACE) :].lstrip("/") or "."
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"path {raw!r} leaves the workspace through '..'")
    return norm


WorkspacePath = Annotated[str, AfterValidator(workspace_path)]


def env_bytes(env: dict[str, str]) -> int:
    """The size of an env as a process gets it: every ``NAME=VALUE``, in UTF-8 bytes."""
    return sum(len(k.encode()) + 1 + len(v.encode()) for k, v in env.items())


def _env(v: dict[str, str]) -> dict[str, str]:
    """An env's entries, names and size within the limits (``MAX_ENV_*``), or why not."""
    if len(v) > MAX_ENV_ENTRIES:
        raise ValueError(f"env has {len(v)} entries; at most {MAX_ENV_ENTRIES} are allowed")
    for k, val in v.items():
        if not _ENV_NAME.fullmatch(k):
            raise ValueError(f"env name {k!r} must match {_ENV_NAME.pattern}")
        if "\x00" in val:
            raise ValueError(f"env value of {k!r} must not contain a NUL byte")
    size = env_bytes(v)
    if size > MAX_ENV_BYTES:
        raise ValueError(
            f"env is {size} bytes (every NAME=VALUE, UTF-8); at most {MAX_ENV_BYTES} are allowed"
        )
    return v


def _labels(v: dict[str, str]) -> dict[str, str]:
    """Labels within ``MAX_LABELS``, ``LABEL_KEY_PATTERN`` and ``MAX_LABEL_VALUE``, or why not."""
    if len(v) > MAX_LABELS:
        raise ValueError(f"labels has {len(v)} entries; at most {MAX_LABELS} are allowed")
    for k, val in v.items():
        if not _LABEL_KEY.fullmatch(k):
            raise ValueError(
                f"label key {k[:80]!r} must be 1-63 letters, digits, '.', '_', '-' or '/', "
                "starting and ending with a letter or digit"
            )
        if len(val) > MAX_LABEL_VALUE:
            raise ValueError(
                f"label {k!r}: value of {len(val)} characters; at most {MAX_LABEL_VALUE} "
                "are allowed"
            )
        if _CONTROL.search(val):
            raise ValueError(f"label {k!r}: value must not contain control characters")
    return v


EnvVars = Annotated[dict[str, str], AfterValidator(_env)]
"""An environment within ``MAX_ENV_ENTRIES``, ``MAX_ENV_BYTES`` and the name rule."""
LabelMap = Annotated[dict[str, str], AfterValidator(_labels)]
"""A session's labels within ``MAX_LABELS``, ``LABEL_KEY_PATTERN``, ``MAX_LABEL_VALUE``."""


class EmptyBody(WireModel):
    """The body of an operation that takes none: absent or ``{}``; an unknown field is 422.

    A caller that sends ``{"memory": true}`` to ``pause`` asked for something the
    grid does not do: it is told so, not given an ordinary pause.
    """


class Quotas(WireModel):
    """Per-sandbox limits. Every field is enforced, the ceilings by the tenant."""

    cpus: float = Field(1.0, gt=0.05, le=16, description="CPU cores (CFS quota)")
    memory_mb: int = Field(512, ge=32, le=65536, description="memory limit; swap is off")
    pids: int = Field(256, ge=8, le=32768, description="max processes and threads")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="default exec deadline")
    workspace_mb: int = Field(256, ge=1, le=65536, description="size of /workspace")
    home_mb: int = Field(128, ge=1, le=65536, description="size of the sandbox user's home")
    tmp_mb: int = Field(64, ge=1, le=65536, description="size of /tmp")
    output_bytes: int = Field(
        DEFAULT_OUTPUT_CAP, ge=1024, le=64 << 20, description="cap on stdout and on stderr"
    )
    nofile: int = Field(1024, ge=64, le=65536, description="open files ulimit")
    fsize_mb: int = Field(256, ge=1, le=65536, description="largest file ulimit")
    network: bool = Field(False, description="network access (only if the type allows it)")
    background_processes: int = Field(
        8, ge=0, le=64, description="background processes running at once in the sandbox"
    )
    max_parallel_turns: int = Field(
        8,
        ge=1,
        le=16,
        description="turns of the session running at once; a call beyond waits in order",
    )


def _rules(field: str, entries: list[str]) -> list[str]:
    return parse_entries(f"network.{field}", entries)


class NetworkPolicy(WireModel):
    """What a session may reach (docs/network.md). None on a session: no network.

    Entries are ``HOST[:PORT]``: a name, ``*.domain``, ``*``, an address or a
    range (``sandgrid.network``). Deny wins over allow; loopback, private,
    link-local and metadata addresses need an allow entry that names their range.
    """

    allow: list[str] = Field(default_factory=list, max_length=MAX_NETWORK_ENTRIES)
    deny: list[str] = Field(default_factory=list, max_length=MAX_NETWORK_ENTRIES)
    max_connections: int = Field(
        10_000, ge=0, le=10_000_000, description="connections the session may open in its life"
    )
    max_bytes: int = Field(
        4 << 30, ge=0, le=1 << 50, description="bytes both ways the session may move in its life"
    )

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: list[str]) -> list[str]:
        return _rules("allow", v)

    @field_validator("deny")
    @classmethod
    def _deny(cls, v: list[str]) -> list[str]:
        return _rules("deny", v)

    @model_validator(mode="after")
    def _bounded(self) -> NetworkPolicy:
        size = len(self.model_dump_json())
        if size > MAX_NETWORK_BYTES:
            raise ValueError(
                f"network policy is {size} bytes as JSON; at most {MAX_NETWORK_BYTES} are allowed"
            )
        return self


class NetworkAttempt(WireModel):
    """One connection attempt of a session, as the worker's egress proxy recorded it."""

    ts: float = Field(description="when it was attempted (Unix time)")
    host: str
    port: int
    address: str = Field("", description="the resolved address connected to (or refused)")
    resolved: bool = Field(
        False,
        description="whether the proxy looked the name up (never for an IP literal, nor for "
        "a name refused before resolution: no policy, or no allow entry could match it)",
    )
    allowed: bool
    rule: str = Field("", description="the entry (or special range) that decided it")
    reason: str = ""
    protocol: str = Field("", description="connect, http or socks5")
    sent: int = Field(0, description="bytes from the sandbox")
    received: int = Field(0, description="bytes to the sandbox")
    duration_ms: float = 0.0
    node: str = ""


class EgressLimits(WireModel):
    """The connection limits the egress proxy holds every connection to (node settings)."""

    handshake_timeout_s: float = Field(description="the request must arrive within this")
    idle_timeout_s: float = Field(description="an established connection idle this long closes")
    max_open: int = Field(description="connections of the session open at once")


class NetworkView(WireModel):
    """Body of ``GET /v1/sessions/{id}/network``: the policy, usage and recent attempts."""

    policy: NetworkPolicy | None
    connections: int = 0
    bytes: int = 0
    attempts: list[NetworkAttempt] = Field(default_factory=list)
    limits: EgressLimits | None = Field(
        None, description="the proxy's connection limits (as its node last said, else the grid's)"
    )


class FileWrite(WireModel):
    """One file to write in the workspace."""

    path: WorkspacePath
    content: str = Field("", max_length=MAX_FILE_BYTES * 2)
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: int = Field(0o644, ge=0, le=0o777)

    @model_validator(mode="after")
    def _base64_content(self) -> FileWrite:
        """Content said to be base64 must decode, so a bad file is refused here, not mid-turn."""
        if self.encoding == "base64":
            try:
                base64.b64decode(self.content, validate=True)
            except ValueError:  # binascii.Error, or a character outside ASCII
                raise ValueError(
                    "content is not valid base64 (encoding is base64): only A-Z, a-z, 0-9, "
                    "+, / and = padding, in groups of 4"
                ) from None
        return self


class ExecRequest(WireModel):
    """One command: exactly one of ``argv``, ``shell`` or ``python``."""

    argv: list[str] | None = Field(None, min_length=1, max_length=4096)
    shell: str | None = Field(None, max_length=MAX_SOURCE_BYTES)
    python: str | None = Field(None, max_length=MAX_SOURCE_BYTES)
    env: EnvVars = Field(default_factory=dict)
    cwd: WorkspacePath = "."
    stdin: str | None = Field(None, max_length=MAX_SOURCE_BYTES)
    timeout_s: float | None = Field(None, gt=0, le=3600)
    stream: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> ExecRequest:
        given = [n for n in ("argv", "shell", "python") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                f"exactly one of argv, shell, python must be set (got {', '.join(given) or 'none'})"
            )
        return self

    @field_validator("argv")
    @classmethod
    def _program(cls, v: list[str] | None) -> list[str] | None:
        """The program is a name or a path: an empty one cannot be started."""
        if v and not v[0]:
            raise ValueError("argv[0]: the program must be a non-empty name or path")
        return v


class SaveError(WireModel):
    """Why the workspace after a turn that ran could not be saved (the store was down)."""

    code: str
    message: str


class ExecResult(WireModel):
    """What one exec did.

    ``saved`` is False when the command ran but the snapshot after it failed
    (``saved_error`` says why): the output is real, the session is marked
    ``unsaved`` until a later snapshot succeeds, and a worker loss before then
    loses the workspace changes since the last snapshot.
    """

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False
    signal: int | None = None
    workspace_full: bool = False
    node: str = ""
    attempt: int = 1
    saved: bool = True
    saved_error: SaveError | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    cancelled: bool = Field(
        False,
        description="the turn was cancelled: every process it started was killed "
        "(or, cancelled before it started, it never ran)",
    )
    kind: Literal["exec"] = Field("exec", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class FileEntry(WireModel):
    path: WorkspacePath
    type: Literal["file", "dir", "symlink", "other"]
    size: int = 0
    mode: int = 0
    mtime: float = 0.0


class FileList(WireModel):
    entries: list[FileEntry]
    kind: Literal["list"] = Field("list", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class FileRead(WireModel):
    path: WorkspacePath
    content: str
    encoding: Literal["utf-8", "base64"]
    size: int
    kind: Literal["read"] = Field("read", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


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


class CodeRequest(WireModel):
    """Body of ``POST /v1/sessions/{id}/code``: code for the session's Jupyter kernel.

    Variables, imports and definitions stay in the kernel between calls; the kernel
    starts with the first call. At ``timeout_s`` (else the quotas' ``timeout_s``) the
    kernel is interrupted and keeps its state; if it does not stop, it is restarted.
    """

    code: str = Field(max_length=MAX_SOURCE_BYTES)
    language: Literal["python"] = "python"
    timeout_s: float | None = Field(None, gt=0, le=3600)


class CodeError(WireModel):
    """The exception that ended the code: its class name, its value, the traceback lines."""

    name: str
    value: str = ""
    traceback: list[str] = Field(default_factory=list)


class CodeResult(WireModel):
    """What one ``run_code`` call produced.

    Every output is capped at the quotas' ``output_bytes`` (``display`` in total),
    with a ``*_truncated`` flag. ``kernel_restarted`` says the kernel state of
    earlier calls is gone: the kernel was restarted at a hard deadline or died, or
    the session moved to a fresh sandbox (kernel state is not part of snapshots).
    """

    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    result: str | None = Field(None, description="text/plain of the last expression's value")
    result_truncated: bool = False
    display: list[dict[str, str]] = Field(
        default_factory=list,
        description="display data, one {mime type: data} per display (images in base64)",
    )
    display_truncated: bool = False
    error: CodeError | None = None
    execution_count: int | None = None
    kernel_restarted: bool = False
    timed_out: bool = False
    duration_ms: float = 0.0
    node: str = ""
    saved: bool = True
    saved_error: SaveError | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    kind: Literal["run_code"] = Field("run_code", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""
