"""The audit trail: who did what in which session, append-only and durable.

One writer per record, on the control plane: the API, where a turn's outcome
is known (``TurnRunner`` calls ``AuditLog.turn``; ``scheduler.audit.describe``
says what its record holds), where a session is created, closed or its network
policy changed, where a terminal opens and closes, and, for the egress
proxies' decisions, the collector that moves them from the workers' per-session
streams (``scheduler.audit.network``). Each record goes to the tenant's Redis
Stream (``sg:audit:<tenant>``, AOF-persisted like the rest of the registry); the
exporter (``scheduler.audit.export``) moves records older than
``SANDGRID_AUDIT__STREAM_KEEP_S`` into per-day JSONL segments in the object
store and only then trims them from the stream, so a record is always in one
place or both, never in none. A reader merges both and drops duplicates by id
(``scheduler.audit.query``: newest first by default, with a cursor).

Never recorded: file contents, environment values, stdin, output. Code or a
command is its ``sha256:`` digest plus its first ``SANDGRID_AUDIT__COMMAND_CHARS``
characters (0 keeps the digest alone).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis as redis_lib

from sandgrid.audit import AuditAction, AuditOrder, AuditPage, AuditRecord
from sandgrid.errors import InvalidInput, SandgridError
from sandgrid.models import ExecRequest
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.objects import ObjectStore
from scheduler import metrics
from scheduler.audit.describe import MAX_PATH_CHARS, code_fields, command_fields, describe
from scheduler.audit.network import NetworkCollector
from scheduler.audit.query import AuditQuery, decode_cursor, read_page

__all__ = ["DEFAULT_AUDIT_LIMIT", "AuditLog", "day_of", "parse_entry"]

log = logging.getLogger(__name__)

#: Records a query answers when the caller names no limit.
DEFAULT_AUDIT_LIMIT = 1000
#: The stream entry's one field: the record as JSON, without its id (the entry's id).
_FIELD = "r"


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
        self.network = NetworkCollector(client)

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
        """Record a finished turn whose op is audited (``scheduler.audit.describe``),
        then the session's network decisions so far; never raises (the turn is done)."""
        fields: dict[str, Any] = {"turn": job.turn_id, "duration_ms": round(duration_ms, 3)}
        if outcome is not None:
            fields["node"] = outcome.node
            fields["outcome"] = "ok" if outcome.ok else str((outcome.error or {}).get("code"))
        if error is not None:
            fields["outcome"] = error.code.value
        try:
            for action, own in describe(job, outcome, self.command_chars):
                self._safe(job, action, **{**fields, **own})
        except Exception:  # the record must not turn a finished turn into an error
            log.exception("audit: could not describe turn %s", job.turn_id)
        self.collect_network(job.session.id, job.session.tenant)

    def terminal(self, job: TurnJob, *, opened_s: float | None = None) -> None:
        """Record a terminal's open (``opened_s`` None) or its close after ``opened_s``
        seconds; never raises. A terminal's input and output are never recorded."""
        if opened_s is None:
            self._safe(job, "terminal_open", turn=job.turn_id)
        else:
            ms = round(opened_s * 1000, 3)
            self._safe(job, "terminal_close", turn=job.turn_id, duration_ms=ms)
            self.collect_network(job.session.id, job.session.tenant)

    def policy(self, tenant: str, session: str, policy: dict[str, Any]) -> None:
        """Record a change of a session's network policy (its JSON's digest and head, its
        entry counts); never raises."""
        text = json.dumps(policy, sort_keys=True)
        counts = {k: len(v) for k, v in policy.items() if k in ("allow", "deny") and v}
        fields = code_fields(text, self.command_chars)
        self.event(tenant, session, "network_policy", **fields, detail=counts)

    def paths(
        self, tenant: str, session: str, op: str, paths: list[str], exit_code: int | None
    ) -> None:
        """Record a workspace op that runs as an exec of its own (``move``, ``mkdir`` of
        the AgentScope routes) by its paths, beside that exec's record; never raises."""
        if op in ("move", "mkdir"):
            detail = dict(zip(("path", "to"), (p[:MAX_PATH_CHARS] for p in paths), strict=False))
            action: AuditAction = "move" if op == "move" else "mkdir"
            outcome = "ok" if exit_code == 0 else f"exit {exit_code}"
            self.event(tenant, session, action, detail=detail, outcome=outcome)

    def event(self, tenant: str, session: str, action: AuditAction, **fields: Any) -> None:
        """``record``, for a caller whose action is done already: never raises.
        A close first collects the session's last network decisions."""
        if action == "session_close":
            self.collect_network(session, tenant)
        try:
            self.record(tenant, session, action, **fields)
        except redis_lib.RedisError:
            metrics.STORE_ERRORS.labels(store="registry", operation="audit").inc()
            log.exception("audit: %s of session %s not recorded", action, session)

    def collect_network(self, session: str, tenant: str) -> None:
        """Move the session's new egress decisions into the trail; never raises."""
        try:
            self.network.collect_sessions([session], tenant)
        except redis_lib.RedisError:
            metrics.STORE_ERRORS.labels(store="registry", operation="audit").inc()
            log.exception("audit: network decisions of session %s not collected", session)

    def _safe(self, job: TurnJob, action: AuditAction, **fields: Any) -> None:
        self.event(job.session.tenant, job.session.id, action, **fields)

    # ---- reading ------------------------------------------------------------------------

    def query(
        self,
        tenant: str,
        *,
        session: str | None = None,
        action: str | None = None,
        since: float | None = None,
        limit: int = DEFAULT_AUDIT_LIMIT,
        order: AuditOrder | None = None,
        cursor: str | None = None,
    ) -> AuditPage:
        """One page of the tenant's records (exported and recent), newest first unless
        ``order="asc"``; its ``next_cursor`` continues it (``scheduler.audit.query``).
        The tenant's open sessions' network decisions are collected first.

        Raises:
            InvalidInput: ``limit`` outside 1..MAX_AUDIT_LIMIT, ``since`` negative,
                a bad cursor, or an ``order`` other than the cursor's.
        """
        query = AuditQuery(tenant, session, action, since, order or "desc", limit)
        return self.page(query, cursor, order_given=order is not None)

    def page(self, query: AuditQuery, cursor: str | None, *, order_given: bool) -> AuditPage:
        """``query``'s page after ``cursor``; ``order_given``: the caller named the order
        (then it must be the cursor's). Raises as ``query``."""
        if cursor is not None:
            wanted = query.order
            query = decode_cursor(cursor, query)
            if order_given and wanted != query.order:
                raise InvalidInput(
                    f"order = {wanted!r}, but the cursor pages in order {query.order!r}",
                    operation="audit",
                    context={"field": "order", "rule": "the order of the cursor's first page"},
                )
        try:
            if query.session is not None:
                self.network.collect_sessions([query.session], query.tenant)
            else:
                self.network.collect_tenant(query.tenant)
        except redis_lib.RedisError:  # the trail is still readable; the decisions come later
            log.exception("audit: network decisions of tenant %s not collected", query.tenant)
        return read_page(self.redis, self.objects, query, parse_entry)
