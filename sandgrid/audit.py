"""The audit trail's wire models: one record per audited action, and a page of them.

The API writes the records (``scheduler.audit``); the SDK and ``sandgrid audit``
read them with ``GET /v1/audit``. A record never holds file contents or
environment values: a command is kept as its SHA-256 digest and, when the grid
is so configured, its first characters.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from sandgrid.models import WireModel

__all__ = [
    "AUDIT_ACTIONS",
    "MAX_AUDIT_LIMIT",
    "MAX_AUDIT_SINCE",
    "AuditAction",
    "AuditDetail",
    "AuditOrder",
    "AuditPage",
    "AuditRecord",
]

#: What is audited: every action that runs code or moves data (docs/operations.md).
#: Sessions (create, fork, pause, resume, close), code (exec, background start,
#: kill and stdin of a process, run_code, terminal open and close), files (write,
#: read, delete, move, mkdir, tar upload and download), the lifecycle (checkpoint,
#: drop, restore), network policy changes, the egress proxy's decisions, and a
#: revocation of preview URLs.
AuditAction = Literal[
    "session_create",
    "session_close",
    "fork",
    "pause",
    "resume",
    "exec",
    "proc_start",
    "proc_kill",
    "proc_stdin",
    "run_code",
    "terminal_open",
    "terminal_close",
    "write",
    "read",
    "delete",
    "move",
    "mkdir",
    "tar_upload",
    "tar_download",
    "checkpoint",
    "checkpoint_drop",
    "restore",
    "network_policy",
    "network",
    "port_urls_revoke",
]
AUDIT_ACTIONS: tuple[str, ...] = get_args(AuditAction)
#: The order of a page: ``desc`` newest first (the default), ``asc`` oldest first.
AuditOrder = Literal["asc", "desc"]
#: A record's small facts: numbers, flags, a path, or a short list of paths.
AuditDetail = dict[str, str | int | float | bool | list[str]]
MAX_AUDIT_SINCE = 4_102_444_800.0
"""The latest ``since`` a query may name (2100-01-01): a stream id must fit in 64 bits."""
#: Records one ``GET /v1/audit`` answers at most.
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
        detail: small facts of the action (a file op's paths, a network
            decision's host, port, rule and whether a name was looked up).
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
    detail: AuditDetail = Field(default_factory=dict)


class AuditPage(WireModel):
    """An answer of ``GET /v1/audit``: records in ``order``; ``more`` when cut at the limit.

    Attributes:
        next_cursor: pass it as ``cursor`` (with the same filters) for the next
            page; None on the last one. Opaque: it names the last record given,
            so paging never skips or repeats one, however many arrive meanwhile.
    """

    records: list[AuditRecord]
    more: bool = False
    order: AuditOrder = "desc"
    next_cursor: str | None = None
