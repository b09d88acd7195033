"""sandgrid: run an agent's shell, Python and file operations on a grid of sandboxes.

    from sandgrid import Client

    with Client() as client, client.session(type="python") as s:   # SANDGRID_API_URL, _TOKEN
        print(s.exec(shell="echo hi").stdout)

What this package holds is what users import: the SDK (``Client``,
``AsyncClient``), the wire models and the error tree, the ``sandgrid`` command
line (``sandgrid.cli``) and framework adapters (``sandgrid.integrations``).
``sandgrid.wire`` is the contract between the grid's own control plane and data
plane; the SDK never imports it. ``import sandgrid`` needs only httpx and pydantic.
"""

from __future__ import annotations

from sandgrid.client import AsyncClient, AsyncSession, Client, Session
from sandgrid.errors import (
    AuthError,
    CapacityError,
    Conflict,
    ErrorCode,
    InfrastructureError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    SandboxError,
    SandboxLost,
    SandgridError,
    SnapshotError,
)
from sandgrid.models import (
    CodeRequest,
    CodeResult,
    ExecRequest,
    ExecResult,
    FileEntry,
    FileList,
    FileRead,
    FileWrite,
    Quotas,
    SessionCreate,
    SessionInfo,
    SessionList,
)

__version__ = "0.2.0"

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AuthError",
    "CapacityError",
    "Client",
    "CodeRequest",
    "CodeResult",
    "Conflict",
    "ErrorCode",
    "ExecRequest",
    "ExecResult",
    "FileEntry",
    "FileList",
    "FileRead",
    "FileWrite",
    "InfrastructureError",
    "InvalidInput",
    "LimitExceeded",
    "NotFound",
    "Quotas",
    "SandboxError",
    "SandboxLost",
    "SandgridError",
    "Session",
    "SessionCreate",
    "SessionInfo",
    "SessionList",
    "SnapshotError",
    "__version__",
]
