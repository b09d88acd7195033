"""The session registry: the control plane's operations on the session ledger.

Redis is the one place where the scheduler and every worker agree on who owns a
session. What a worker does there (leases, turn claims, records, heartbeats) is
``sandgrid.wire.redis_ledger.RedisLedger``, the one implementation of the wire
contract ``SessionLedger``; the registry holds one (``ledger``, on the same
client) and adds what only the API does. Each compare-and-set is a Lua script
(``lua/*.lua`` here, run through the wire's ``LuaScripts``; the ledger's own
beside it) so that it is atomic without WATCH loops. Keys come only from
``sandgrid.wire.names``.

Who calls what:
    * the API: ``create``, ``get``, ``list``, ``close``, ``save_record``,
      ``close_record``, the turns' operations of ``scheduler.registry.turns``
      (``admit_turn``, ``begin_turn`` / ``end_turn``, ``finish_turn``,
      ``withdraw``, ``abandon_turn``...), ``node_alive``, and of the ledger's operations the
      ones it exposes: ``get_any``, ``update``, ``requeue_turn``,
      ``lease_owner``, ``node_record``, ``node_records``.
    * a worker (through ``SessionLedger``, the registry's ``ledger`` in tests):
      ``get_any``, ``update``, ``acquire_lease``, ``renew_leases``,
      ``release_lease``, ``heartbeat``, ``claim_turn``, ``record_turn``, and the
      snapshot-collection notes.
    * ``sandgrid admin rebuild``: ``rebuild``.

With ``records`` (``scheduler.registry.records``), each session's record is
also kept in the object store, and a session that Redis no longer knows (it
lost its data) is re-learned from there on its next ``get``, or by ``rebuild``.
"""

from __future__ import annotations

import builtins
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from sandgrid.errors import InvalidInput, LimitExceeded, NotFound
from sandgrid.models import SessionCreate, SessionInfo
from sandgrid.wire import names
from sandgrid.wire.ledger import NodeRecord
from sandgrid.wire.preview import ALL_PORTS
from sandgrid.wire.redis_ledger import DERIVED_FIELDS, RedisLedger, Requeue
from sandgrid.wire.scripts import LuaScripts
from scheduler import metrics
from scheduler.registry import LUA_DIR
from scheduler.registry.records import SessionRecords
from scheduler.registry.serving import ServingClock
from scheduler.registry.turns import SessionTurns

__all__ = [
    "MAX_PORT_EPOCHS",
    "RebuildReport",
    "SessionRegistry",
    "new_session_id",
    "new_turn_id",
]


#: Ports of one session that may have a revocation epoch of their own (the record's size).
MAX_PORT_EPOCHS = 64


def new_session_id() -> str:
    """An unguessable session id: knowing one id tells nothing about another."""
    return "s-" + secrets.token_urlsafe(24)


def new_turn_id() -> str:
    """A turn id, also used (with the attempt) as the Celery task id."""
    return "t-" + secrets.token_urlsafe(12)


@dataclass(frozen=True)
class RebuildReport:
    """What ``SessionRegistry.rebuild`` did with the records it found."""

    relearned: int = 0
    """Sessions Redis did not know, now in the registry again."""
    known: int = 0
    """Sessions Redis still knew (left as they are)."""
    closed: int = 0
    """Records of closed sessions (never brought back), or unreadable ones."""


class SessionRegistry(SessionTurns):
    """The API's operations on the ledger: records, and (``SessionTurns``) the
    turns' slots, waiters and records.

    Args:
        client: a Redis client created with ``decode_responses=True``.
        lease_ttl_s: how long a lease lives without renewal (the ledger's).
        closed_ttl_s: how long a closed session's record is kept (404 after).
        records: the sessions' records in the object store (None: Redis alone,
            nothing to re-learn from).
    """

    def __init__(
        self,
        client: redis.Redis[str],
        *,
        lease_ttl_s: float = 15.0,
        closed_ttl_s: float = 86400.0,
        records: SessionRecords | None = None,
    ) -> None:
        self.redis = client
        #: The worker's operations on the same client: the one ``SessionLedger``.
        self.ledger = RedisLedger(client, lease_ttl_s=lease_ttl_s)
        self.scripts = LuaScripts(client, LUA_DIR)
        self.closed_ttl_s = closed_ttl_s
        self.records = records
        self.serving = ServingClock(client)

    def uptime_s(self) -> float:
        """Seconds Redis has served as this process's primary, at most since it
        started (``scheduler.registry.serving``): heartbeats that lapsed while it was
        down, or while Sentinel promoted a replica, say nothing of a node until it
        has had time to beat again."""
        return self.serving.served_s()

    # ---- the ledger's operations the API uses ------------------------------------

    def get_any(self, session_id: str) -> SessionInfo | None:
        """The session of any tenant, or None (``SessionLedger.get_any``)."""
        return self.ledger.get_any(session_id)

    def update(self, session_id: str, **fields: Any) -> None:
        """Set fields of a session record (``SessionLedger.update``; its errors)."""
        self.ledger.update(session_id, **fields)

    def requeue_turn(self, turn_id: str, attempt: int, holder: str) -> Requeue:
        """Replace a lost attempt by the next (``RedisLedger.requeue_turn``)."""
        return self.ledger.requeue_turn(turn_id, attempt, holder)

    def lease_owner(self, session_id: str) -> str | None:
        """The node holding the session's lease, or None."""
        return self.ledger.lease_owner(session_id)

    def node_record(self, node: str) -> NodeRecord | None:
        """``node``'s heartbeat record, uncached (``scheduler.turns.watch``)."""
        return self.ledger.node_record(node)

    def node_records(self) -> dict[str, NodeRecord]:
        """Every live node's heartbeat record, by name (``scheduler.registry.nodes``)."""
        return self.ledger.node_records()

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
            NotFound: the type was removed after admission read it (checked
                atomically with the insert; see ``TypeCatalog.remove``).
        """
        info = _new_record(tenant, spec, snapshot=snapshot, forked_from=forked_from)
        inserted = self._insert(info, max_sessions, check_type=True)
        if inserted == -2:
            raise NotFound(
                f"type: no sandbox type {spec.type!r} (it was removed)",
                operation="sessions.create",
                context={"field": "type", "rule": "a type in the catalog"},
            )
        if inserted != 1:
            metrics.reject("max_sessions")
            raise LimitExceeded(
                f"tenant {tenant!r} has {max_sessions} live sessions, its ceiling; close one first",
                operation="sessions.create",
                context={"limit": "max_sessions", "max": max_sessions},
                retry_after=5.0,
            )
        return info

    def _insert(self, info: SessionInfo, max_sessions: int, *, check_type: bool = False) -> int:
        """Store a new record: 1 done, 0 the tenant is at ``max_sessions``, -1 the
        session is there already, -2 (``check_type``) its type is no longer in the
        catalog (see ``lua/create_session.lua``)."""
        fields = info.model_dump(mode="json", exclude=set(DERIVED_FIELDS))
        args: builtins.list[Any] = [max_sessions, info.id, info.type if check_type else ""]
        for key, value in fields.items():
            args += [key, json.dumps(value)]
        keys = [
            names.session_key(info.id),
            names.tenant_sessions_key(info.tenant),
            names.types_key(),
            names.types_version_key(),
        ]
        return int(self.scripts.run("create_session", keys, args))

    def get(self, tenant: str, session_id: str, *, brief: bool = False) -> SessionInfo:
        """The session ``session_id`` of ``tenant``, re-learned from its record in
        the store if Redis lost it. ``brief``: a turn's lookup, without the lease's
        TTL and the busy check (``RedisLedger.get_any``).

        Raises:
            NotFound: unknown id, a closed session whose record Redis no longer
                holds, or a session of another tenant (same answer, so that ids
                cannot be probed across tenants).
            InfrastructureError: ``store_unavailable`` while re-learning.
        """
        info = self.ledger.get_any(session_id, brief=brief)
        if info is None and self.records is not None:
            info = self.relearn(tenant, session_id)
        if info is None or info.tenant != tenant:
            raise NotFound(
                f"session {session_id!r} not found",
                operation="sessions.get",
                context={"session": session_id},
            )
        return info

    def list(self, tenant: str) -> builtins.list[SessionInfo]:
        """The tenant's sessions that are not closed, oldest first."""
        ids = sorted(self.redis.smembers(names.tenant_sessions_key(tenant)))
        found = [self.ledger.get_any(i) for i in ids]
        return sorted((i for i in found if i is not None), key=lambda i: i.created_at)

    def count(self, tenant: str) -> int:
        """How many sessions of the tenant are not closed."""
        return int(self.redis.scard(names.tenant_sessions_key(tenant)))

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

    def revoke_port_urls(self, session_id: str, port: int | None) -> dict[str, int]:
        """Revoke the session's preview URLs of ``port`` (None: of every port) made so
        far (``lua/revoke_port_urls.lua``); the session's epochs after.

        Raises:
            NotFound: the session is gone or closed.
            InvalidInput: ``port`` would be one port more than ``MAX_PORT_EPOCHS``
                with an epoch of its own (revoke every port instead).
        """
        scope = ALL_PORTS if port is None else str(port)
        args = [scope, MAX_PORT_EPOCHS]
        out = self.scripts.run("revoke_port_urls", [names.session_key(session_id)], args)
        if out == "full":
            raise InvalidInput(
                f"port: {MAX_PORT_EPOCHS} ports of session {session_id!r} have their URLs "
                "revoked apart already; revoke every port's (no port) instead",
                operation="ports.revoke",
                context={"field": "port", "rule": f"at most {MAX_PORT_EPOCHS} ports apart"},
            )
        if not out:
            raise NotFound(f"session {session_id!r} is closed", operation="ports.revoke")
        return {str(k): int(v) for k, v in json.loads(out).items()}

    # ---- records in the store -------------------------------------------------------

    def save_record(self, info: SessionInfo) -> None:
        """Keep the record of a new session in the store (no-op without ``records``).

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        if self.records is not None:
            self.records.save(info)

    def close_record(self, tenant: str, session_id: str) -> None:
        """Mark the stored record closed: a lost registry never brings it back.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        if self.records is not None:
            self.records.close(tenant, session_id)

    def relearn(self, tenant: str, session_id: str) -> SessionInfo | None:
        """Put the session back from its record in the store, unless Redis has it
        (two API processes may re-learn it at once: the first one wins, the other
        reads its entry). None: no record, or a closed one.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        info = self.records.live(tenant, session_id) if self.records is not None else None
        if info is None:
            return None
        self._insert(info, 0)
        return self.ledger.get_any(session_id)

    def rebuild(self) -> RebuildReport:
        """Re-learn every session whose record is in the store (all tenants);
        running it twice re-learns nothing the second time.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        if self.records is None:
            return RebuildReport()
        relearned = known = closed = 0
        for tenant, session_id in self.records.scan():
            if self.redis.exists(names.session_key(session_id)):
                known += 1
            elif self.relearn(tenant, session_id) is not None:
                relearned += 1
            else:
                closed += 1
        return RebuildReport(relearned, known, closed)

    # ---- leases and heartbeats ---------------------------------------------------

    def node_alive(self, node: str) -> bool:
        """Whether ``node``'s heartbeat has not lapsed."""
        return bool(self.redis.exists(names.node_key(node)))

    def live_nodes(self) -> builtins.list[str]:
        """Every node whose heartbeat has not lapsed (health checks; uses SCAN)."""
        keys = self.redis.scan_iter(match=names.node_key_pattern(), count=500)
        return sorted(names.node_from_key(k) for k in keys)


def _new_record(
    tenant: str, spec: SessionCreate, *, snapshot: str | None, forked_from: str | None
) -> SessionInfo:
    """The record of a new session of ``tenant`` from its create request: state new."""
    now = datetime.now(UTC)
    return SessionInfo(
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
        idle_timeout_s=spec.idle_timeout_s,
        expires_at=now + timedelta(seconds=spec.max_lifetime_s) if spec.max_lifetime_s else None,
        network=spec.network,
        on_idle=spec.on_idle,
    )
