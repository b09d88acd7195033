"""The audit trail's wire models: one record per audited action, and a page of them.

The API writes the records (``scheduler.audit``); the SDK and ``sandgrid audit``
read them with ``GET /v1/audit``. A record never holds file contents or
environment values: a command is kept as its SHA-256 digest and, when the grid
is so configured, its first characters.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models import WireModel

__all__ = [
    "AUDIT_ACTIONS",
    "MAX_AUDIT_LIMIT",
    "MAX_AUDIT_SINCE",
    "AuditAction",
    "AuditPage",
    "AuditRecord",
]

#: What is audited: sessions created and closed, the ops that change a workspace
#: or run code, and the egress proxy's decisions on connections.
AuditAction = Literal["session_create", "session_close", "exec", "write", "tar_upload", "network"]
AUDIT_ACTIONS: tuple[str, ...] = (
    "session_create",
    "session_close",
    "exec",
    "write",
    "tar_upload",
    "network",
)
#: Records one ``GET /v1/audit`` answers at most.
MAX_AUDIT_SINCE = 4_102_444_800.0
"""The latest ``since`` a query may name (2100-01-01): a stream id must fit in 64 bits."""
MAX_AUDIT_LIMIT = 10_000


class AuditRecord(WireModel):
    """One audited action.

    Attributes:
        id: its id in the trail (``<ms>-<seq>``, ordered by time), unique.
        ts: when it was recorded (epoch seconds).
        outcome: ``ok``, or the error code the caller got.
        exit_code: an exec's exit code. duration_ms: the turn, end to end.
        bytes: what the action moved (a write's or an upload's payload, an exec's output).
        command_digest / command_head: ``sha256:<hex>`` of the command, and its
            first characters (``SANDGRID_AUDIT__COMMAND_CHARS``).
        detail: small facts of the action (a network decision's host, port, verdict).
    """

    id: str = ""
    ts: float
    tenant: str
    session: str
    action: AuditAction
    turn: str = ""
    node: str = ""
    outcome: str = "ok"
    exit_code: int | None = None
    duration_ms: float | None = None
    bytes: int | None = None
    command_digest: str | None = None
    command_head: str | None = None
    detail: dict[str, str | int | float | bool] = Field(default_factory=dict)


class AuditPage(WireModel):
    """An answer of ``GET /v1/audit``: records in time order; ``more`` when cut at the limit."""

    records: list[AuditRecord]
    more: bool = False
