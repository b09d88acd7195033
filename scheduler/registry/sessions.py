"""The session registry: session records, leases, heartbeats and turn locks in Redis.

Redis is the one place where the scheduler and every worker agree on who owns a
session. Each compare-and-set is a Lua script (``lua/*.lua``) so that it is atomic
without WATCH loops. Keys come only from ``sandgrid.wire.names``.

Who calls what:
    * the API: ``create``, ``get``, ``list``, ``close``, ``begin_turn`` /
      ``end_turn``, ``acquire_turn_slot`` / ``release_turn_slot``,
      ``abandon_turn``, ``lease_owner``, ``node_alive``.
    * a worker: ``get_any``, ``update``, ``acquire_lease``, ``renew_leases``,
      ``release_lease``, ``heartbeat``, ``claim_turn``.

A record is a hash of ``SessionInfo`` fields, each JSON-encoded. ``owner`` and
``lease_expires`` are never stored: they are read from the lease key, which is the
truth (a lease is a string key holding the owner node, with a TTL).
"""

from __future__ import annotations

import builtins
import json
import secrets
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import redis
from pydantic import TypeAdapter

from sandgrid.errors import LimitExceeded, NotFound
from sandgrid.models import SessionCreate, SessionInfo
from sandgrid.wire import names
from sandgrid.wire.settings import Settings

__all__ = ["SessionRegistry", "new_session_id", "new_turn_id"]

_LUA = Path(__file__).with_name("lua")
_DERIVED = frozenset({"owner", "lease_expires"})
_IMMUTABLE = frozenset({"id", "tenant", "created_at", "v"})
#: How long a turn record outlives its lock: long enough to refuse a late redelivery.
TURN_RECORD_TTL_S = 3 * 3600.0


def new_session_id() -> str:
    """An unguessable session id: knowing one id tells nothing about another."""
    return "s-" + secrets.token_urlsafe(24)


def new_turn_id() -> str:
    """A turn id, also used (with the attempt) as the Celery task id."""
    return "t-" + secrets.token_urlsafe(12)


@cache
def _adapter(field: str) -> TypeAdapter[Any]:
    annotation: Any = SessionInfo.model_fields[field].annotation
    return TypeAdapter(annotation)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class SessionRegistry:
    """Session records, leases, node heartbeats and turn locks over one Redis pool.

    Args:
        client: a Redis client created with ``decode_responses=True``.
        lease_ttl_s: how long a lease lives without renewal.
        closed_ttl_s: how long a closed session's record is kept (404 after).
    """

    def __init__(
        self, client: redis.Redis[str], *, lease_ttl_s: float = 15.0, closed_ttl_s: float = 86400.0
    ) -> None:
        self.redis = client
        self.lease_ttl_s = lease_ttl_s
        self.closed_ttl_s = closed_ttl_s
        self._scripts = {
            p.stem: client.register_script(p.read_text()) for p in sorted(_LUA.glob("*.lua"))
        }

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionRegistry:
        """A registry on a new connection pool for ``settings.redis_url``."""
        client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
        return cls(client, lease_ttl_s=settings.lease_ttl_s, closed_ttl_s=settings.closed_ttl_s)

    def _run(self, script: str, keys: builtins.list[str], args: builtins.list[Any]) -> Any:
        return self._scripts[script](keys=keys, args=args)

    # ---- records -------------------------------------------------------------

    def create(
        self,
        tenant: str,
        spec: SessionCreate,
        *,
        snapshot: str | None = None,
        forked_from: str | None = None,
        max_sessions: int = 0,
    ) -> SessionInfo:
        """Record a new session of ``tenant``; no container is started yet.

        Args:
            tenant: the owning tenant.
            spec: the validated create request.
            snapshot: a snapshot (of this session) to start from.
            forked_from: the session it is forked from (shown; the fork's own
                snapshot is set by the worker that copies it).
            max_sessions: the tenant's ceiling of live sessions (0: none), checked
                atomically with the insert.

        Raises:
            LimitExceeded: the tenant already has ``max_sessions`` live sessions.
        """
        now = datetime.now(UTC)
        info = SessionInfo(
            id=new_session_id(),
            tenant=tenant,
            type=spec.type,
            quotas=spec.quotas,
            env=spec.env,
            snapshot_policy=spec.snapshot_policy,
            snapshot=snapshot,
            forked_from=forked_from,
            created_at=now,
            last_used=now,
            labels=spec.labels,
        )
        fields = info.model_dump(mode="json", exclude=set(_DERIVED))
        args: builtins.list[Any] = [max_sessions, info.id]
        for key, value in fields.items():
            args += [key, json.dumps(value)]
        keys = [names.session_key(info.id), names.tenant_sessions_key(tenant)]
        if not self._run("create_session", keys, args):
            raise LimitExceeded(
                f"tenant {tenant!r} has {max_sessions} live sessions, its ceiling; close one first",
                operation="sessions.create",
                context={"limit": "max_sessions", "max": max_sessions},
                retry_after=5.0,
            )
        return info

    def get(self, tenant: str, session_id: str) -> SessionInfo:
        """The session ``session_id`` of ``tenant``.

        Raises:
            NotFound: unknown id, or a session of another tenant (same answer, so
                that ids cannot be probed across tenants).
        """
        info = self._load(session_id)
        if info is None or info.tenant != tenant:
            raise NotFound(
                f"session {session_id!r} not found",
                operation="sessions.get",
                context={"session": session_id},
            )
        return info

    def get_any(self, session_id: str) -> SessionInfo | None:
        """The session, whoever its tenant (worker side); None when unknown."""
        return self._load(session_id)

    def list(self, tenant: str) -> builtins.list[SessionInfo]:
        """The tenant's sessions that are not closed, oldest first."""
        ids = sorted(self.redis.smembers(names.tenant_sessions_key(tenant)))
        found = [self._load(i) for i in ids]
        return sorted((i for i in found if i is not None), key=lambda i: i.created_at)

    def count(self, tenant: str) -> int:
        """How many sessions of the tenant are not closed."""
        return int(self.redis.scard(names.tenant_sessions_key(tenant)))

    def update(self, session_id: str, **fields: Any) -> None:
        """Set fields of a session record (worker: ``snapshot``, ``state``...).

        Args:
            session_id: the session.
            **fields: ``SessionInfo`` fields and their new values; validated.

        Raises:
            ValueError: an unknown, immutable or derived field (``owner`` and
                ``lease_expires`` come from the lease: use ``acquire_lease``).
            pydantic.ValidationError: a value of the wrong type.
            NotFound: the session record is gone.
        """
        self._update(session_id, fields, incr="")

    def record_turn(
        self,
        session_id: str,
        snapshot: str | None = None,
        turn_id: str | None = None,
        *,
        unsaved: bool = False,
    ) -> None:
        """Count a finished turn, stamp ``last_used`` and keep the latest snapshot.

        ``turn_id`` is kept as ``last_turn``: a turn re-dispatched after its
        worker died is not run again when the record shows it completed.
        ``unsaved`` says that the workspace has changes no snapshot holds: a
        turn whose worker dies is then not run again from a stale snapshot.
        """
        fields: dict[str, Any] = {"last_used": datetime.now(UTC), "unsaved": unsaved}
        if turn_id:
            fields["last_turn"] = turn_id
        if snapshot:
            fields["snapshot"] = snapshot
        self._update(session_id, fields, incr="turns")

    def close(self, session_id: str) -> None:
        """Mark a session closed; its record stays ``closed_ttl_s`` for a clear answer.

        The worker that held its container is told by a ``CloseOp`` turn (the API
        sends it); the lease key is left to that worker to release.
        """
        key = names.session_key(session_id)
        raw_tenant = self.redis.hget(key, "tenant")
        if raw_tenant is None:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(key, "state", json.dumps("closed"))
        pipe.srem(names.tenant_sessions_key(json.loads(raw_tenant)), session_id)
        pipe.expire(key, int(self.closed_ttl_s))
        pipe.execute()

    def _update(self, session_id: str, fields: dict[str, Any], *, incr: str) -> None:
        args: builtins.list[Any] = [incr]
        for key, value in fields.items():
            if key not in SessionInfo.model_fields or key in _IMMUTABLE or key in _DERIVED:
                raise ValueError(f"session field {key!r} cannot be updated")
            adapter = _adapter(key)
            checked = adapter.validate_python(value)
            args += [key, json.dumps(adapter.dump_python(checked, mode="json"))]
        if not self._run("update_session", [names.session_key(session_id)], args):
            raise NotFound(f"session {session_id!r} not found", operation="sessions.update")

    def _load(self, session_id: str) -> SessionInfo | None:
        """One round trip: record, lease holder and TTL, turn lock."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(names.session_key(session_id))
        pipe.get(names.lease_key(session_id))
        pipe.pttl(names.lease_key(session_id))
        pipe.exists(names.turnlock_key(session_id))
        raw, owner, pttl, busy = pipe.execute()
        if not raw:
            return None
        data = {k: json.loads(v) for k, v in raw.items()}
        data["owner"] = owner
        data["lease_expires"] = time.time() + pttl / 1000 if owner and pttl > 0 else None
        data["state"] = _derive_state(data, owner, bool(busy))
        return SessionInfo.model_validate(data)

    # ---- leases and heartbeats ---------------------------------------------------

    def acquire_lease(self, session_id: str, node: str) -> bool:
        """Take the session's lease for ``node`` (atomic), for ``lease_ttl_s``.

        Returns:
            True when the lease was free or expired, already held by ``node``
            (then it is extended), or held by a node whose heartbeat has lapsed
            (a dead node). False when another live node holds it.
        """
        key = names.lease_key(session_id)
        holder = self.redis.get(key)
        seen_key = names.node_key(holder) if holder and holder != node else key
        args = [node, _ms(self.lease_ttl_s), holder if seen_key != key else ""]
        return bool(self._run("acquire_lease", [key, seen_key], args))

    def renew_leases(self, node: str, ids: Iterable[str]) -> builtins.list[str]:
        """Extend the leases that ``node`` still holds, by ``lease_ttl_s`` (atomic).

        Returns:
            The ids whose lease was *lost*: it expired or another node took it.
            Drop those sessions' local containers; every other id was renewed.
        """
        ids = list(ids)
        if not ids:
            return []
        keys = [names.lease_key(i) for i in ids]
        kept = {int(i) - 1 for i in self._run("renew_leases", keys, [node, _ms(self.lease_ttl_s)])}
        return [sid for n, sid in enumerate(ids) if n not in kept]

    def release_lease(self, session_id: str, node: str) -> bool:
        """Give up the lease, only if ``node`` holds it. True when it was released."""
        key = names.lease_key(session_id)
        return bool(self._run("release_if_owner", [key], [node]))

    def lease_owner(self, session_id: str) -> str | None:
        """The node holding the session's lease, or None when free or expired."""
        owner: str | None = self.redis.get(names.lease_key(session_id))
        return owner

    def heartbeat(self, node: str, ttl: float) -> None:
        """Say that ``node`` is alive for the next ``ttl`` seconds (call every ttl/3)."""
        self.redis.set(names.node_key(node), json.dumps({"ts": time.time()}), px=_ms(ttl))

    def node_alive(self, node: str) -> bool:
        """Whether ``node``'s heartbeat has not lapsed."""
        return bool(self.redis.exists(names.node_key(node)))

    def live_nodes(self) -> builtins.list[str]:
        """Every node whose heartbeat has not lapsed (health checks; uses SCAN)."""
        keys = self.redis.scan_iter(match=names.node_key_pattern(), count=500)
        return sorted(names.node_from_key(k) for k in keys)

    # ---- turns -------------------------------------------------------------------

    def begin_turn(self, session_id: str, turn_id: str, ttl: float) -> bool:
        """Take the session's turn lock for ``ttl`` seconds and record the turn queued.

        Returns:
            False when another turn of the session is in flight (the API answers
            409 ``session_busy``).
        """
        keys = [names.turnlock_key(session_id), names.turn_key(turn_id)]
        args = [turn_id, _ms(ttl), session_id, time.time(), _ms(ttl + TURN_RECORD_TTL_S)]
        return bool(self._run("begin_turn", keys, args))

    def end_turn(self, session_id: str, turn_id: str) -> bool:
        """Release the turn lock if ``turn_id`` still holds it; mark the turn done."""
        keys = [names.turnlock_key(session_id), names.turn_key(turn_id)]
        return bool(self._run("end_turn", keys, [turn_id]))

    def claim_turn(self, turn_id: str, node: str, attempt: int = 1) -> bool:
        """Worker side, before running a turn: queued -> running, atomically.

        Returns:
            False when the turn was abandoned by the API (its waiter gave up),
            is already running or done (a redelivered message): do not run it.
            True when it may run (also when no record exists: nothing to guard).
        """
        args = [node, attempt, time.time()]
        return bool(self._run("claim_turn", [names.turn_key(turn_id)], args))

    def retry_turn(self, turn_id: str, attempt: int) -> bool:
        """API side: queue attempt ``attempt`` of a turn whose worker died.

        Only the attempt before it may be replaced; a redelivered message of an
        older attempt is then refused by ``claim_turn``.
        """
        return bool(self._run("retry_turn", [names.turn_key(turn_id)], [attempt]))

    def abandon_turn(self, turn_id: str) -> bool:
        """API side: nobody waits for this turn any more; a late claim is refused."""
        return bool(self._run("set_turn_state", [names.turn_key(turn_id)], ["abandoned"]))

    def turn_state(self, turn_id: str) -> dict[str, str]:
        """The turn record: ``state`` (queued, running, done, abandoned), ``node``..."""
        record: dict[str, str] = self.redis.hgetall(names.turn_key(turn_id))
        return record

    def note_gc_tenant(self, tenant: str) -> None:
        """Worker side: ``tenant`` was served now, so its snapshots need collecting
        for a while (grid-wide: any node collects it, also after a restart)."""
        self.redis.zadd(names.gc_tenants_key(), {tenant: time.time()})

    def gc_tenants(self, since: float) -> builtins.list[str]:
        """The tenants served since ``since`` (epoch seconds); older ones are dropped."""
        key = names.gc_tenants_key()
        self.redis.zremrangebyscore(key, "-inf", f"({since}")
        return sorted(str(t) for t in self.redis.zrangebyscore(key, since, "+inf"))

    def claim_gc(self, tenant: str, interval_s: float) -> bool:
        """Worker side: take the right to collect ``tenant``'s snapshots for the next
        ``interval_s`` seconds, grid-wide (one node collects a tenant per interval)."""
        return bool(self.redis.set(names.gc_key(tenant), "1", nx=True, px=_ms(interval_s)))

    def acquire_turn_slot(self, tenant: str, turn_id: str, limit: int, ttl: float) -> bool:
        """Take one of ``limit`` in-flight turn slots of ``tenant`` for ``ttl`` seconds."""
        now = time.time()
        args = [turn_id, limit, now, now + ttl, _ms(ttl)]
        return bool(self._run("turn_slot", [names.tenant_turns_key(tenant)], args))

    def release_turn_slot(self, tenant: str, turn_id: str) -> None:
        """Give back the slot of a finished turn."""
        self.redis.zrem(names.tenant_turns_key(tenant), turn_id)

    def turns_in_flight(self, tenant: str) -> int:
        """The tenant's turns in flight (slots not past their deadline)."""
        key = names.tenant_turns_key(tenant)
        return int(self.redis.zcount(key, time.time(), "+inf"))


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
