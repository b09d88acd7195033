"""The audit trail: who did what in which session, append-only and durable.

One writer per record: the API, where a turn's outcome is known
(``TurnRunner.on_turn`` calls ``AuditLog.turn``), and where a session is
created and closed. Each record goes to the tenant's Redis Stream
(``sg:audit:<tenant>``, AOF-persisted like the rest of the registry); the
exporter (``scheduler.audit.export``) moves records older than
``SANDGRID_AUDIT__STREAM_KEEP_S`` into per-day JSONL segments in the object
store and only then trims them from the stream, so a record is always in one
place or both, never in none. A reader merges both and drops duplicates by id.

Never recorded: file contents, environment values, stdin, output. A command is
its ``sha256:`` digest plus its first ``SANDGRID_AUDIT__COMMAND_CHARS``
characters (0 keeps the digest alone).

Other parts record their own actions with ``AuditLog.record`` (the egress
proxy's per-connection decisions: ``action="network"``, ``detail`` with host,
port and verdict).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import time
from typing import Any

import redis as redis_lib

from sandgrid.audit import MAX_AUDIT_LIMIT, MAX_AUDIT_SINCE, AuditAction, AuditPage, AuditRecord
from sandgrid.errors import InvalidInput, SandgridError
from sandgrid.models import ExecRequest, ExecResult
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import TarUploadOp, WriteOp
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.objects import ObjectStore
from sandgrid.wire.objects.keys import audit_day_of, audit_prefix
from scheduler import metrics

__all__ = ["DEFAULT_AUDIT_LIMIT", "AuditLog", "command_fields", "day_of", "parse_entry"]

log = logging.getLogger(__name__)

#: Records a query answers when the caller names no limit.
DEFAULT_AUDIT_LIMIT = 1000
#: The stream entry's one field: the record as JSON, without its id (the entry's id).
_FIELD = "r"


def command_fields(request: ExecRequest, head_chars: int) -> tuple[str, str | None]:
    """The digest of an exec's command and its first ``head_chars`` characters."""
    text = request.shell if request.shell is not None else request.python
    if text is None:
        text = shlex.join(request.argv or [])
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return digest, (text[:head_chars] if head_chars > 0 else None)


def day_of(ts: float) -> str:
    """The UTC day (``YYYY-MM-DD``) of an epoch time."""
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


def parse_entry(entry_id: str, fields: dict[str, str]) -> AuditRecord | None:
    """A stream entry as a record (its id the entry's); None for an unreadable one."""
    try:
        return AuditRecord.model_validate({**json.loads(fields[_FIELD]), "id": entry_id})
    except (KeyError, ValueError):
        log.warning("audit entry %s is unreadable; skipped", entry_id)
        return None


class AuditLog:
    """Writes and reads the audit trail.

    Args:
        client: the registry's Redis (the streams live beside the sessions).
        objects: the object store that holds the exported segments.
        command_chars: the first characters of a command kept beside its digest.
    """

    def __init__(self, client: redis_lib.Redis[str], objects: ObjectStore, command_chars: int):
        self.redis = client
        self.objects = objects
        self.command_chars = command_chars

    def record(
        self,
        tenant: str,
        session: str,
        action: AuditAction,
        *,
        command: ExecRequest | None = None,
        **fields: Any,
    ) -> str:
        """Append one record; its id. The public way for any part to audit an action.

        Args:
            tenant: whose action. session: in which session.
            action: one of ``sandgrid.audit.AUDIT_ACTIONS``.
            command: an exec's request: only its digest and head are kept.
            fields: the other ``AuditRecord`` fields (turn, node, outcome,
                exit_code, duration_ms, bytes, detail).

        Raises:
            pydantic.ValidationError: a field of the wrong type or an unknown one.
            redis.RedisError: the stream could not be written.
        """
        if command is not None:
            fields["command_digest"], fields["command_head"] = command_fields(
                command, self.command_chars
            )
        rec = AuditRecord(ts=time.time(), tenant=tenant, session=session, action=action, **fields)
        body = rec.model_dump_json(exclude={"id"}, exclude_none=True)
        return str(self.redis.xadd(names.audit_key(tenant), {_FIELD: body}))

    def turn(
        self,
        job: TurnJob,
        outcome: TurnOutcome | None,
        error: SandgridError | None,
        duration_ms: float,
    ) -> None:
        """Record a finished turn whose op is audited; never raises (the turn is done)."""
        op = job.op
        fields: dict[str, Any] = {"turn": job.turn_id, "duration_ms": round(duration_ms, 3)}
        if outcome is not None:
            fields["node"] = outcome.node
            fields["outcome"] = "ok" if outcome.ok else str((outcome.error or {}).get("code"))
        if error is not None:
            fields["outcome"] = error.code.value
        result = outcome.result if outcome is not None else None
        try:
            if isinstance(op, ExecOp):
                ran = result if isinstance(result, ExecResult) else None
                fields["exit_code"] = ran.exit_code if ran is not None else None
                fields["bytes"] = len(ran.stdout) + len(ran.stderr) if ran is not None else None
                self._safe(job, "exec", command=op.request, **fields)
            elif isinstance(op, WriteOp):
                fields["bytes"] = sum(len(f.content) for f in op.files)
                fields["detail"] = {"files": len(op.files)}
                self._safe(job, "write", **fields)
            elif isinstance(op, TarUploadOp):
                fields["bytes"] = len(op.data_b64) * 3 // 4
                self._safe(job, "tar_upload", **fields)
        except Exception:  # the record must not turn a finished turn into an error
            log.exception("audit: could not describe turn %s", job.turn_id)

    def event(self, tenant: str, session: str, action: AuditAction, **fields: Any) -> None:
        """``record``, for a caller whose action is done already: never raises."""
        try:
            self.record(tenant, session, action, **fields)
        except redis_lib.RedisError:
            metrics.STORE_ERRORS.labels(store="registry", operation="audit").inc()
            log.exception("audit: %s of session %s not recorded", action, session)

    def _safe(self, job: TurnJob, action: AuditAction, **fields: Any) -> None:
        self.event(job.session.tenant, job.session.id, action, **fields)

    # ---- reading ------------------------------------------------------------------------

    def query(
        self,
        tenant: str,
        *,
        session: str | None = None,
        since: float | None = None,
        limit: int = DEFAULT_AUDIT_LIMIT,
    ) -> AuditPage:
        """The tenant's records from ``since`` on (exported and recent), oldest first.

        Raises:
            InvalidInput: ``limit`` outside 1..MAX_AUDIT_LIMIT, or ``since`` negative.
        """
        if not 1 <= limit <= MAX_AUDIT_LIMIT:
            raise InvalidInput(
                f"limit = {limit} must be between 1 and {MAX_AUDIT_LIMIT}",
                operation="audit",
                context={"field": "limit", "rule": f"1..{MAX_AUDIT_LIMIT}"},
            )
        if since is not None and not 0 <= since <= MAX_AUDIT_SINCE:
            raise InvalidInput(
                f"since = {since} must be an epoch time in 0..{MAX_AUDIT_SINCE:.0f}",
                operation="audit",
                context={"field": "since", "rule": f"0..{MAX_AUDIT_SINCE:.0f} (epoch seconds)"},
            )
        found: dict[str, AuditRecord] = {}
        for rec in [*self._exported(tenant, since), *self._recent(tenant, since)]:
            if session is None or rec.session == session:
                found[rec.id] = rec
        ordered = sorted(found.values(), key=lambda r: _id_key(r.id))
        return AuditPage(records=ordered[:limit], more=len(ordered) > limit)

    def _recent(self, tenant: str, since: float | None) -> list[AuditRecord]:
        start = f"{int(since * 1000)}-0" if since else "-"
        entries = self.redis.xrange(names.audit_key(tenant), min=start, max="+")
        return [r for r in (parse_entry(i, f) for i, f in entries) if r is not None]

    def _exported(self, tenant: str, since: float | None) -> list[AuditRecord]:
        first_day = day_of(since) if since else ""
        out: list[AuditRecord] = []
        for key in sorted(self.objects.list(audit_prefix(tenant))):
            day = audit_day_of(tenant, key)
            if day is None or day < first_day:
                continue
            for line in self.objects.get(key).decode().splitlines():
                rec = _line_record(line)
                if rec is not None and (since is None or rec.ts >= since):
                    out.append(rec)
        return out


def _line_record(line: str) -> AuditRecord | None:
    """A segment's line as a record; None for a blank or a kept unreadable one."""
    try:
        return AuditRecord.model_validate_json(line) if line.strip() else None
    except ValueError:
        return None


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)
