"""The session ledger in Redis: the one implementation of ``SessionLedger``.

Workers use it as it is; the scheduler's ``SessionRegistry`` holds one (on the
same Redis client) beside its control-plane operations (create, list, close,
turn locks...), so every operation and every Lua script exists once. Each
compare-and-set is a Lua script (``lua/*.lua`` beside this module, run through
``sandgrid.wire.scripts.LuaScripts``) so that it is atomic without WATCH loops;
keys come only from ``sandgrid.wire.names``.

A record is a hash of ``SessionInfo`` fields, each JSON-encoded. ``owner`` and
``lease_expires`` are never stored: they are read from the lease key, which is
the truth (a lease is a string key holding the owner node, with a TTL).

Configured by ``lease_ttl_s`` (``SANDGRID_LEASE_TTL_S`` with ``from_settings``)
and a Redis client created with ``decode_responses=True``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal, Self

import redis
from pydantic import TypeAdapter, ValidationError
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from sandgrid.errors import NotFound
from sandgrid.models import SessionInfo
from sandgrid.wire import names, redis_connect
from sandgrid.wire.ledger import Claim, NodeRecord, SessionLedger
from sandgrid.wire.scripts import LuaScripts
from sandgrid.wire.settings import Settings

__all__ = [
    "DERIVED_FIELDS",
    "LUA_DIR",
    "OUTAGE_BACKOFF_CAP_S",
    "WORKER_OUTAGE_WAIT_S",
    "RedisLedger",
    "Requeue",
    "millis",
]

#: What ``requeue_turn`` did: sent again, refused for good, or the holder changed.
Requeue = Literal["requeued", "final", "held"]
_REQUEUE: dict[int, Requeue] = {0: "final", 1: "requeued", 2: "held"}

#: The Lua scripts of the ledger's own operations.
LUA_DIR = Path(__file__).with_name("lua")
#: Record fields read from the lease, never stored.
DERIVED_FIELDS = frozenset({"owner", "lease_expires"})
#: The longest pause between two tries of a command while Redis is unreachable (s).
OUTAGE_BACKOFF_CAP_S = 1.0
#: How long a worker's commands ride out a Redis outage (a restart takes seconds).
WORKER_OUTAGE_WAIT_S = 30.0
_IMMUTABLE = frozenset({"id", "tenant", "created_at", "v"})


def millis(seconds: float) -> int:
    """A Redis TTL in milliseconds, at least 1 (0 would mean no expiry or an error)."""
    return max(1, int(seconds * 1000))


@cache
def _adapter(field: str) -> TypeAdapter[Any]:
    annotation: Any = SessionInfo.model_fields[field].annotation
    return TypeAdapter(annotation)


class RedisLedger(SessionLedger):
    """Session records, leases, heartbeats and turn claims over one Redis pool.

    Args:
        client: a Redis client created with ``decode_responses=True``.
        lease_ttl_s: how long a lease lives without renewal.
    """

    def __init__(self, client: redis.Redis[str], *, lease_ttl_s: float = 15.0) -> None:
        self.redis = client
        self.lease_ttl_s = lease_ttl_s
        self.scripts = LuaScripts(client, LUA_DIR)

    @classmethod
    def from_settings(cls, settings: Settings, *, outage_wait_s: float = 0.0) -> Self:
        """A ledger on a new connection pool for ``settings.redis_url``.

        Args:
            settings: the process settings.
            outage_wait_s: how long a command keeps retrying while Redis is
                unreachable (backing off to 1 s). A worker waits (a turn that ran
                and was saved must still be recorded); the API does not (it
                answers 503 at once and the client retries).
        """
        options: dict[str, Any] = {}
        if outage_wait_s > 0:
            tries = max(1, int(outage_wait_s / OUTAGE_BACKOFF_CAP_S))
            backoff = ExponentialBackoff(cap=OUTAGE_BACKOFF_CAP_S, base=0.05)
            options["retry"] = Retry(backoff, tries)
            options["retry_on_error"] = [redis.ConnectionError, redis.TimeoutError]
        client = redis_connect.connect(settings.redis_url, decode_responses=True, **options)
        return cls(client, lease_ttl_s=settings.lease_ttl_s)

    # ---- turns -------------------------------------------------------------------

    def receive_turn(self, turn_id: str, node: str, attempt: int, incarnation: str) -> bool:
        args = [node, attempt, time.time(), incarnation, "hold"]
        return bool(self.scripts.run("claim_turn", [names.turn_key(turn_id)], args))

    def claim_turn(self, turn_id: str, node: str, attempt: int = 1, incarnation: str = "") -> Claim:
        args = [node, attempt, time.time(), incarnation, "run"]
        return Claim(int(self.scripts.run("claim_turn", [names.turn_key(turn_id)], args)))

    def requeue_turn(self, turn_id: str, attempt: int, holder: str) -> Requeue:
        """API side: replace attempt ``attempt`` of a turn whose holder died by the next.

        Args:
            turn_id: the turn.
            attempt: the attempt the caller saw (the one to replace).
            holder: the incarnation the caller saw holding it ('' for none); when
                another one holds it now, nothing changes (``held``).

        Returns:
            ``requeued``: send attempt ``attempt + 1`` now (the old message will be
            refused by ``claim_turn``); ``final``: the turn is done, abandoned or
            already replaced; ``held``: a live process took it meanwhile.
        """
        code = self.scripts.run("requeue_turn", [names.turn_key(turn_id)], [attempt, holder])
        return _REQUEUE[int(code)]

    def record_turn(
        self,
        session_id: str,
        snapshot: str | None = None,
        turn_id: str | None = None,
        *,
        unsaved: bool = False,
    ) -> None:
        fields: dict[str, Any] = {"last_used": datetime.now(UTC), "unsaved": unsaved}
        if turn_id:
            fields["last_turn"] = turn_id
        if snapshot:
            fields["snapshot"] = snapshot
        self._update(session_id, fields, incr="turns")

    # ---- leases and heartbeats ---------------------------------------------------

    def acquire_lease(self, session_id: str, node: str) -> bool:
        key = names.lease_key(session_id)
        holder = self.redis.get(key)
        seen_key = names.node_key(holder) if holder and holder != node else key
        args = [node, millis(self.lease_ttl_s), holder if seen_key != key else ""]
        return bool(self.scripts.run("acquire_lease", [key, seen_key], args))

    def renew_leases(self, node: str, ids: Iterable[str]) -> list[str]:
        ids = list(ids)
        if not ids:
            return []
        keys = [names.lease_key(i) for i in ids]
        renewed = self.scripts.run("renew_leases", keys, [node, millis(self.lease_ttl_s)])
        kept = {int(i) - 1 for i in renewed}
        return [sid for n, sid in enumerate(ids) if n not in kept]

    def release_lease(self, session_id: str, node: str) -> bool:
        key = names.lease_key(session_id)
        return bool(self.scripts.run("release_if_owner", [key], [node]))

    def lease_owner(self, session_id: str) -> str | None:
        owner: str | None = self.redis.get(names.lease_key(session_id))
        return owner

    def heartbeat(
        self,
        node: str,
        ttl: float,
        *,
        incarnation: str = "",
        types: Sequence[str] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "",
        ports_addr: str = "",
    ) -> None:
        record = NodeRecord(
            ts=time.time(),
            inc=incarnation,
            types=tuple(types or ()) or None,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            ports_addr=ports_addr,
        )
        self.redis.set(names.node_key(node), record.model_dump_json(), px=millis(ttl))

    def node_record(self, node: str) -> NodeRecord | None:
        return _node_record(self.redis.get(names.node_key(node)))

    def node_records(self) -> dict[str, NodeRecord]:
        """Every live node's heartbeat record, by name (one SCAN and one MGET)."""
        keys = sorted(self.redis.scan_iter(match=names.node_key_pattern(), count=500))
        if not keys:
            return {}
        found = {}
        for key, raw in zip(keys, self.redis.mget(keys), strict=True):
            record = _node_record(raw)
            if record is not None:
                found[names.node_from_key(key)] = record
        return found

    # ---- records -------------------------------------------------------------------

    def update(self, session_id: str, **fields: Any) -> None:
        self._update(session_id, fields, incr="")

    def _update(self, session_id: str, fields: dict[str, Any], *, incr: str) -> None:
        args: list[Any] = [incr]
        for key, value in fields.items():
            if key not in SessionInfo.model_fields or key in _IMMUTABLE or key in DERIVED_FIELDS:
                raise ValueError(f"session field {key!r} cannot be updated")
            adapter = _adapter(key)
            checked = adapter.validate_python(value)
            args += [key, json.dumps(adapter.dump_python(checked, mode="json"))]
        if not self.scripts.run("update_session", [names.session_key(session_id)], args):
            raise NotFound(f"session {session_id!r} not found", operation="sessions.update")

    def get_any(self, session_id: str, *, brief: bool = False) -> SessionInfo | None:
        """One round trip: record, lease holder and TTL, turns in flight.

        ``brief`` (a turn's own lookup, issue 22.1): the record and the lease holder
        only, two commands instead of four; ``lease_expires`` is None and a session
        with turns in flight shows ``live``, not ``busy`` (a turn reads neither:
        it needs the owner, and whether the session is closed).
        """
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(names.session_key(session_id))
        pipe.get(names.lease_key(session_id))
        if not brief:
            pipe.pttl(names.lease_key(session_id))
            pipe.exists(names.turnlock_key(session_id), names.session_turns_key(session_id))
        raw, owner, *more = pipe.execute()
        if not raw:
            return None
        pttl, busy = more or (0, 0)
        data = {k: json.loads(v) for k, v in raw.items()}
        data["owner"] = owner
        data["lease_expires"] = time.time() + pttl / 1000 if owner and pttl > 0 else None
        data["state"] = _derive_state(data, owner, bool(busy))
        return SessionInfo.model_validate(data)

    # ---- snapshot collection ---------------------------------------------------------

    def note_gc_tenant(self, tenant: str) -> None:
        self.redis.zadd(names.gc_tenants_key(), {tenant: time.time()})

    def gc_tenants(self, since: float) -> list[str]:
        key = names.gc_tenants_key()
        self.redis.zremrangebyscore(key, "-inf", f"({since}")
        return sorted(str(t) for t in self.redis.zrangebyscore(key, since, "+inf"))

    def claim_gc(self, tenant: str, interval_s: float) -> bool:
        return bool(self.redis.set(names.gc_key(tenant), "1", nx=True, px=millis(interval_s)))


def _node_record(raw: str | None) -> NodeRecord | None:
    """A heartbeat value; an unreadable one still says the node lives (any type)."""
    if raw is None:
        return None
    try:
        return NodeRecord.model_validate_json(raw)
    except ValidationError:
        return NodeRecord(ts=0.0)


def _derive_state(data: dict[str, Any], owner: str | None, busy: bool) -> str:
    """The state shown: stored ``closed``/``lost`` win, then the lock, then the lease."""
    stored = str(data.get("state", "new"))
    if stored in ("closed", "lost"):
        return stored
    if busy:
        return "busy"
    if owner:
        return "live"
    return "new" if stored == "new" and not data.get("turns") else "idle"
