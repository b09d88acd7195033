"""Admission control: per-tenant ceilings and queue-depth backpressure.

Two kinds of refusal, chosen so that a client knows whether waiting helps:

* a request above a tenant's *quota ceiling* (cpus, memory, timeout,
  workspace, output, network, sandbox type), or above the *type's* ceilings
  (``SandboxTypeSpec.ceilings``, unless the tenant's ``type_ceilings`` replace
  them), is ``InvalidInput`` (422) naming the field and the rule: retrying the
  same request never helps;
* a type the tenant cannot see (unknown, removed, or another tenant's private
  type: ``sandgrid.wire.catalog``) is ``NotFound`` (404), the same answer for all;
* a type that no live worker serves is ``CapacityError`` (503 ``no_capacity``),
  answered at once from the nodes' heartbeats (``scheduler.registry.nodes``);
* a tenant at its *count* ceilings (live sessions, turns in flight) or a queue
  deeper than ``settings.queue_depth_limit`` is ``LimitExceeded`` (429) with a
  ``Retry-After``: the same request may pass later.

The queue depth is the length of the Redis list that backs the Celery queue
(kombu's Redis transport keeps a queue's messages of default priority in a
list named after the queue). A turn's admission reads it only when this
process's own last push to that queue (``LPUSH`` answers the length:
``sandgrid.wire.broker.pushed_depth``), at most a second old, did not find it
below half the limit (issue 22.1: one command less per turn). Pushes of other
API processes within that second may go unseen, so a queue may pass the limit
by that much before this process refuses; the next push it makes tells it.
"""

from __future__ import annotations

import redis

from sandgrid.errors import ErrorCode, InvalidInput, LimitExceeded, SandgridError
from sandgrid.models import ExecRequest, Quotas, SessionCreate
from sandgrid.sandbox_types import SandboxTypeSpec, effective_quotas
from sandgrid.wire import broker, catalog
from scheduler import metrics
from scheduler.registry.nodes import NodeDirectory
from scheduler.registry.sessions import SessionRegistry
from scheduler.tenants import Tenant

__all__ = [
    "BACKPRESSURE_RETRY_AFTER_S",
    "TURNS_RETRY_AFTER_S",
    "Admission",
    "check_exec",
    "check_quotas",
    "check_timeout",
    "check_type_ceilings",
]

#: Retry-After (s) when a queue is too deep: about the time a busy worker needs.
BACKPRESSURE_RETRY_AFTER_S = 2.0
#: Retry-After (s) when the tenant has too many turns in flight.
TURNS_RETRY_AFTER_S = 1.0


def _over(field: str, value: float, ceiling: float, tenant: Tenant) -> InvalidInput:
    metrics.reject("quota")
    return InvalidInput(
        f"{field} = {value} exceeds tenant {tenant.name!r}'s ceiling of {ceiling}",
        operation="admission",
        context={"field": field, "rule": f"<= {ceiling}", "value": value, "ceiling": ceiling},
    )


def check_quotas(tenant: Tenant, quotas: Quotas, field: str = "quotas") -> None:
    """Refuse quotas above the tenant's ceilings.

    Raises:
        InvalidInput: the first field above its ceiling, named.
    """
    lim = tenant.limits
    pairs: list[tuple[str, float, float]] = [
        ("cpus", quotas.cpus, lim.max_cpus),
        ("memory_mb", quotas.memory_mb, lim.max_memory_mb),
        ("pids", quotas.pids, lim.max_pids),
        ("timeout_s", quotas.timeout_s, lim.max_timeout_s),
        ("workspace_mb", quotas.workspace_mb, lim.max_workspace_mb),
        ("output_bytes", quotas.output_bytes, lim.max_output_bytes),
        ("max_parallel_turns", quotas.max_parallel_turns, lim.max_parallel_turns),
    ]
    for name, value, ceiling in pairs:
        if value > ceiling:
            raise _over(f"{field}.{name}", value, ceiling, tenant)
    if quotas.network and not lim.allow_network:
        metrics.reject("quota")
        raise InvalidInput(
            f"{field}.network: tenant {tenant.name!r} may not enable network access",
            operation="admission",
            context={"field": f"{field}.network", "rule": "network not allowed for tenant"},
        )


def check_type_ceilings(tenant: Tenant, kind: SandboxTypeSpec, quotas: Quotas) -> None:
    """Refuse quotas above the type's ceilings, or the tenant's own for that type.

    Raises:
        InvalidInput: the first field above its ceiling, named.
    """
    ceilings = {**kind.ceilings, **tenant.limits.type_ceilings.get(kind.name, {})}
    for name, ceiling in sorted(ceilings.items()):
        value = getattr(quotas, name)
        if value > ceiling:
            metrics.reject("quota")
            raise InvalidInput(
                f"quotas.{name} = {value} exceeds sandbox type {kind.name!r}'s ceiling of "
                f"{ceiling} for tenant {tenant.name!r}",
                operation="admission",
                context={"field": f"quotas.{name}", "rule": f"<= {ceiling}", "ceiling": ceiling},
            )


def check_timeout(tenant: Tenant, timeout_s: float | None) -> None:
    """Refuse a turn's own deadline above the tenant's ceiling (``run_code``, say)."""
    if timeout_s is not None and timeout_s > tenant.limits.max_timeout_s:
        raise _over("timeout_s", timeout_s, tenant.limits.max_timeout_s, tenant)


def check_exec(tenant: Tenant, request: ExecRequest) -> None:
    """Refuse an exec whose own deadline is above the tenant's ceiling."""
    if request.timeout_s is not None and request.timeout_s > tenant.limits.max_timeout_s:
        raise _over("timeout_s", request.timeout_s, tenant.limits.max_timeout_s, tenant)


class Admission:
    """Admission checks that need Redis: queue depth and turn slots.

    Args:
        client: the Redis client (broker and registry share the server).
        registry: the session registry, which keeps the tenants' turn slots.
        queue_depth_limit: refuse new turns when a queue holds more messages.
        nodes: the live nodes; a ``NodeDirectory`` over ``registry`` when omitted.
    """

    def __init__(
        self,
        client: redis.Redis[str],
        registry: SessionRegistry,
        *,
        queue_depth_limit: int,
        nodes: NodeDirectory | None = None,
    ) -> None:
        self.redis = client
        self.registry = registry
        self.queue_depth_limit = queue_depth_limit
        self.nodes = nodes or NodeDirectory(registry)

    def check_capacity(self, sandbox_type: str, operation: str = "admission") -> None:
        """Refuse work of a type that no live node serves (see ``NodeDirectory.require``).

        Raises:
            CapacityError: 503 ``no_capacity``.
        """
        try:
            self.nodes.require(sandbox_type, operation)
        except SandgridError as exc:
            if exc.code == ErrorCode.NO_CAPACITY:
                metrics.reject("no_capacity")
            raise

    def check_session(self, tenant: Tenant, spec: SessionCreate) -> SessionCreate:
        """Quota ceilings and allowed types of a new session (the count is atomic later).

        Returns:
            ``spec`` with the type's default quotas for the fields it does not set
            (the same ``spec`` for a type with no defaults).

        Raises:
            NotFound: a type the tenant cannot see (unknown, removed, private to another).
            InvalidInput: a type the tenant may not use, a quota above its ceiling
                or the type's, or network on a type that does not allow it.
        """
        kind = catalog.current().find(spec.type, tenant.name, "admission")
        allowed = tenant.limits.types
        if allowed is not None and spec.type not in allowed:
            metrics.reject("quota")
            raise InvalidInput(
                f"type: tenant {tenant.name!r} may not use sandbox type {spec.type!r}",
                operation="admission",
                context={"field": "type", "rule": f"one of {allowed}"},
            )
        if kind.quotas:
            spec = spec.model_copy(update={"quotas": effective_quotas(kind, spec.quotas)})
        check_type_ceilings(tenant, kind, spec.quotas)
        check_quotas(tenant, spec.quotas)
        if spec.on_idle == "memory" and kind.runtime != "runsc":  # issue 24
            raise InvalidInput(
                f"on_idle: the {spec.type} type runs on {kind.runtime}, which cannot save a "
                "sandbox's memory (only gVisor's runsc can; docs/memory.md)",
                operation="admission",
                context={"field": "on_idle", "runtime": kind.runtime, "rule": "gVisor types only"},
            )
        if spec.quotas.network and not kind.network_allowed:
            metrics.reject("quota")
            raise InvalidInput(
                f"quotas.network: sandbox type {spec.type!r} does not allow network access",
                operation="admission",
                context={"field": "quotas.network", "rule": "network not allowed for type"},
            )
        return spec

    def check_queue(self, queue: str) -> None:
        """Refuse new work when ``queue`` is deeper than the limit.

        Raises:
            LimitExceeded: code ``backpressure``, with ``retry_after``.
        """
        depth = int(self.redis.llen(queue))
        if depth > self.queue_depth_limit:
            raise self._backpressure(queue, depth)

    def acquire_turn(self, tenant: Tenant, turn_id: str, ttl: float) -> None:
        """Take a slot among the tenant's concurrent turns.

        Raises:
            LimitExceeded: code ``tenant_limit``, the tenant is at its ceiling.
        """
        limit = tenant.limits.max_concurrent_turns
        if not self.registry.acquire_turn_slot(tenant.name, turn_id, limit, ttl):
            raise _tenant_limit(tenant)

    def admit(
        self,
        tenant: Tenant,
        queue: str,
        session_id: str,
        turn_id: str,
        ttl: float,
        *,
        parallel: int = 1,
        shared: bool = False,
    ) -> bool:
        """``check_queue``, ``acquire_turn`` and a slot among the session's
        ``parallel`` turns (``SessionRegistry.admit_turn``) in one round trip: the
        turn path's admission costs one Redis call instead of three, and a refusal
        takes nothing (no slot to give back).

        Returns:
            False when the turn must wait for a slot of its session (nothing
            taken; it keeps its place among the session's waiters).

        Raises:
            LimitExceeded: ``backpressure`` or ``tenant_limit``, as the two checks do.
        """
        limit = tenant.limits.max_concurrent_turns
        pushed = broker.pushed_depth(queue)
        verdict, depth = self.registry.admit_turn(
            queue,
            self.queue_depth_limit,
            tenant.name,
            limit,
            session_id,
            turn_id,
            ttl,
            parallel=parallel,
            shared=shared,
            check_depth=pushed is None or pushed * 2 > self.queue_depth_limit,
        )
        if verdict == "backpressure":
            raise self._backpressure(queue, depth)
        if verdict == "tenant_limit":
            raise _tenant_limit(tenant)
        return verdict == "ok"

    def _backpressure(self, queue: str, depth: int) -> LimitExceeded:
        metrics.reject("backpressure")
        return LimitExceeded(
            f"queue {queue} holds {depth} turns (limit {self.queue_depth_limit}); retry later",
            code=ErrorCode.BACKPRESSURE,
            operation="admission",
            context={"queue": queue, "depth": depth, "limit": self.queue_depth_limit},
            retry_after=BACKPRESSURE_RETRY_AFTER_S,
        )

    def release_turn(self, tenant: Tenant, turn_id: str) -> None:
        """Give the slot back."""
        self.registry.release_turn_slot(tenant.name, turn_id)


def _tenant_limit(tenant: Tenant) -> LimitExceeded:
    metrics.reject("tenant_limit")
    limit = tenant.limits.max_concurrent_turns
    return LimitExceeded(
        f"tenant {tenant.name!r} has {limit} turns in flight, its ceiling",
        operation="admission",
        context={"limit": "max_concurrent_turns", "max": limit},
        retry_after=TURNS_RETRY_AFTER_S,
    )
