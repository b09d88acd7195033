"""Wire models: one definition for the API, the SDK, Celery messages and the worker.

Every model that crosses HTTP, Celery or Redis is frozen and carries
``v`` (the wire version). Variants are ``kind: Literal[...]`` discriminated
unions. Validation errors name the field and the rule; they surface as 422 with
code ``invalid_input`` (see ``sandgrid.errors``).

One module per family, all re-exported here (``from sandgrid.models import X``
is the public API): ``base`` (``WireModel``, the limits, the checked fields),
``quotas``, ``network`` (a session's egress policy and what it recorded),
``files``, ``exec``, ``code`` and ``session`` (the create body and the record).
"""

from __future__ import annotations

from sandgrid.models.base import (
    CHECKPOINT_NAME_PATTERN,
    DEFAULT_OUTPUT_CAP,
    IDEMPOTENCY_HEADER,
    LABEL_KEY_PATTERN,
    MAX_ENV_BYTES,
    MAX_ENV_ENTRIES,
    MAX_FILE_BYTES,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_NETWORK_BYTES,
    MAX_NETWORK_ENTRIES,
    MAX_RECORD_BYTES,
    MAX_SOURCE_BYTES,
    MAX_TTL_S,
    NEXT_OFFSET_HEADER,
    WIRE_VERSION,
    WORKSPACE,
    EmptyBody,
    EnvVars,
    IdleAction,
    LabelMap,
    SandboxTypeName,
    SessionId,
    SessionState,
    SnapshotPolicy,
    WireModel,
    WorkspacePath,
    env_bytes,
    workspace_path,
)
from sandgrid.models.code import (
    CodeError,
    CodeRequest,
    CodeResult,
)
from sandgrid.models.exec import (
    ExecRequest,
    ExecResult,
    SaveError,
)
from sandgrid.models.files import (
    FileEntry,
    FileList,
    FileRead,
    FileWrite,
)
from sandgrid.models.network import (
    EgressLimits,
    NetworkAttempt,
    NetworkPolicy,
    NetworkView,
)
from sandgrid.models.quotas import (
    Quotas,
)
from sandgrid.models.session import (
    SessionCreate,
    SessionInfo,
    SessionList,
)

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
