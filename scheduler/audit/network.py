"""Network decisions into the audit trail: collected from what the egress proxies record.

A worker's egress proxy appends every connection attempt, allowed or refused,
to the session's bounded stream ``sg:egress:<id>`` (``worker.egress.book``),
which ``GET /v1/sessions/{id}/network`` shows. The control plane moves each
attempt into the tenant's audit trail as one ``network`` record, once: a
per-session cursor (``sg:audit-net:<id>``) names the last attempt moved, and
it is compared and moved in the same Lua script that appends the records
(``lua/append_network.lua``), so two API processes never append one twice.

When: at the end of each of the session's turns and at its close
(``AuditLog``), for the tenant's open sessions before every read of the trail
(``GET /v1/audit``), and for every session's stream at each export round
(``AuditExporter``), which catches connections that end after a close. The
proxy keeps the latest ``audit_max`` attempts of a session: if more were made
between two collections, the first record after the gap says
``detail.dropped_before: true`` (the stream's ``entries-added`` against the
attempts the cursor has consumed, ``n``).

A record keeps the decision (host, port, address, allowed, rule, reason,
protocol, the attempt's own time, and ``lookup``, whether the proxy resolved
the name, when the proxy reports it) and the bytes moved, never a payload.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import redis as redis_lib

from sandgrid.audit import AuditRecord
from sandgrid.wire import names
from sandgrid.wire.scripts import LuaScripts

__all__ = ["CURSOR_TTL_S", "NetworkCollector", "network_record"]

log = logging.getLogger(__name__)

#: How long a session's cursor outlives its last collection at least: beyond the
#: egress stream's own expiry (7 days by default; the script keeps it a day beyond
#: the stream's TTL when that is longer), so no attempt is collected twice.
CURSOR_TTL_S = 30 * 86400
#: Attempts moved per script call.
_BATCH = 500
#: Sessions whose stream's end a collector remembers (``collect_sessions``).
_KNOWN_MAX = 10_000
#: The attempt's fields a record keeps (the others are counts, kept as ``bytes``).
_KEPT = ("host", "port", "address", "allowed", "rule", "reason", "protocol")
#: The names under which an egress proxy may say whether it resolved the name.
_LOOKUP = ("lookup", "looked_up", "resolved")


def network_record(tenant: str, session: str, raw: dict[str, Any]) -> AuditRecord:
    """The audit record of one attempt as the proxy wrote it (unknown fields ignored)."""
    detail: dict[str, Any] = {k: raw[k] for k in _KEPT if isinstance(raw.get(k), str | int)}
    if isinstance(raw.get("ts"), int | float):
        detail["attempt_ts"] = float(raw["ts"])
    for name in _LOOKUP:
        if isinstance(raw.get(name), bool):
            detail["lookup"] = raw[name]
            break
    allowed = raw.get("allowed") is True
    sent, received = int(raw.get("sent") or 0), int(raw.get("received") or 0)
    return AuditRecord(
        ts=time.time(),
        tenant=tenant,
        session=session,
        action="network",
        node=str(raw.get("node") or ""),
        outcome="ok" if allowed else "refused",
        duration_ms=float(raw.get("duration_ms") or 0.0),
        bytes=sent + received,
        detail=detail,
    )


class NetworkCollector:
    """Moves egress attempts into the audit trail (see the module doc).

    Args:
        client: the registry's Redis (the egress streams live beside the sessions).
        cursor_ttl_s: how long a session's cursor is kept after its last move.
    """

    def __init__(self, client: redis_lib.Redis[str], cursor_ttl_s: int = CURSOR_TTL_S) -> None:
        self.redis = client
        self.cursor_ttl_s = cursor_ttl_s
        self._scripts = LuaScripts(client, Path(__file__).with_name("lua"))
        #: session id -> the last attempt of its stream, known moved ("": none)
        self._known: dict[str, str] = {}

    def collect(self, session_id: str, tenant: str | None = None) -> int:
        """Move the session's new attempts; how many. ``tenant``: skip unless it is the owner.

        Raises:
            redis.RedisError: Redis did not answer (nothing was moved twice).
        """
        done = 0
        while True:
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(names.audit_network_cursor_key(session_id), ["id", "tenant", "n"])
            pipe.hget(names.session_key(session_id), "tenant")
            (cursor, known, seen), raw_owner = pipe.execute()
            owner = known or (json.loads(raw_owner) if raw_owner else None)
            if owner is None or (tenant is not None and owner != tenant):
                return done  # whose it is is not known (or not the caller's): left alone
            moved = self._move(session_id, str(owner), cursor or "", int(seen or 0))
            if moved is None:
                continue  # another process moved some meanwhile: read again
            done += moved[0]
            if not moved[1]:
                return done

    def collect_sessions(self, session_ids: list[str], tenant: str | None = None) -> int:
        """``collect`` each of ``session_ids`` that has attempts not moved yet (one
        round trip finds them).

        A session whose stream ended, at its last look from this process, at an
        attempt already moved (or had none) is looked at by its stream's last entry
        alone, without its cursor (issue 22.1: one command less per turn): when that
        entry is still the same, nothing came after it. Any other answer reads the
        cursor, as the first look does.
        """
        known = [self._known.get(sid) for sid in session_ids]
        pipe = self.redis.pipeline(transaction=False)
        for sid, seen in zip(session_ids, known, strict=True):
            if seen is None:
                pipe.hget(names.audit_network_cursor_key(sid), "id")
            pipe.xrevrange(names.egress_audit_key(sid), count=1)
        replies = iter(pipe.execute())
        done = 0
        for sid, seen in zip(session_ids, known, strict=True):
            cursor = seen if seen is not None else (next(replies) or "")
            last = next(replies)
            last_id = str(last[0][0]) if last else ""
            if last_id and last_id != cursor:
                self._known.pop(sid, None)
                done += self.collect(sid, tenant)
            else:
                self._remember(sid, last_id)
        return done

    def _remember(self, session_id: str, last_id: str) -> None:
        """Note that ``session_id``'s stream ends at ``last_id``, moved ("": empty)."""
        if len(self._known) >= _KNOWN_MAX and session_id not in self._known:
            self._known.clear()  # only a shortcut: forgetting costs one read each
        self._known[session_id] = last_id

    def collect_tenant(self, tenant: str) -> int:
        """``collect_sessions`` over the tenant's open sessions."""
        return self.collect_sessions(
            sorted(self.redis.smembers(names.tenant_sessions_key(tenant))), tenant
        )

    def sweep(self) -> int:
        """``collect_sessions`` over every session's egress stream in Redis."""
        suffix = names.egress_usage_key("")[len(names.egress_audit_key("")) :]
        prefix = names.egress_audit_key("")
        ids = [
            key[len(prefix) :]
            for key in self.redis.scan_iter(match=f"{prefix}*", count=500)
            if not key.endswith(suffix)
        ]
        return sum(self.collect_sessions(ids[i : i + 200]) for i in range(0, len(ids), 200))

    def _move(
        self, session_id: str, tenant: str, cursor: str, seen: int
    ) -> tuple[int, bool] | None:
        """One batch after ``cursor`` (``seen`` attempts were consumed before it):
        (records appended, more may follow); None: another process moved them first."""
        key = names.egress_audit_key(session_id)
        entries = self.redis.xrange(key, min=f"({cursor}" if cursor else "-", count=_BATCH)
        if not entries:
            return 0, False
        bodies = []
        dropped = self._dropped(key, cursor, seen)
        for entry_id, fields in entries:
            try:
                rec = network_record(tenant, session_id, json.loads(fields["a"]))
            except (KeyError, ValueError, TypeError):
                log.warning("egress attempt %s of %s is unreadable; skipped", entry_id, session_id)
                continue
            if dropped:
                rec = rec.model_copy(update={"detail": {**rec.detail, "dropped_before": True}})
                dropped = False
            bodies.append(rec.model_dump_json(exclude={"id"}, exclude_none=True))
        keys = [names.audit_network_cursor_key(session_id), names.audit_key(tenant), key]
        args = [cursor, entries[-1][0], tenant, self.cursor_ttl_s, len(entries), *bodies]
        n = int(self._scripts.run("append_network", keys, args))
        return None if n < 0 else (n, len(entries) == _BATCH)

    def _dropped(self, key: str, cursor: str, seen: int) -> bool:
        """Attempts after ``cursor`` were trimmed away before they were collected: the
        stream starts after the cursor, and holds fewer than were added since it."""
        try:
            info = self.redis.xinfo_stream(key)
        except redis_lib.ResponseError:
            return False
        first = info.get("first-entry")
        if not first or (cursor and _key(first[0]) <= _key(cursor)):
            return False  # what the cursor reached is still there: nothing after it was cut
        return int(info.get("entries-added") or 0) - seen > int(info.get("length") or 0)


def _key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)
