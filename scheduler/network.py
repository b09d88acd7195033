"""The control plane's side of egress: which policy a session gets, and its audit.

A session's policy is the first of: its own (``SessionCreate.network``), its
type's default (``SandboxTypeSpec.default_network``), its tenant's default
(``TenantLimits.network_default``); none of them means no network. Every allow
entry must be covered by the tenant's ``network_ceiling`` (operator-set): an
entry beyond it is 422 naming the entry. The policy lives in the session
record, so it follows the session to any worker; the worker's egress proxy
reads it on every connection (docs/network.md).
"""

from __future__ import annotations

import redis as redis_lib

from sandgrid.errors import InvalidInput
from sandgrid.models import (
    EgressLimits,
    NetworkAttempt,
    NetworkPolicy,
    NetworkView,
    SessionCreate,
)
from sandgrid.network import covers
from sandgrid.wire import names
from sandgrid.wire.catalog import get_type
from sandgrid.wire.settings import get_settings
from scheduler.tenants import Tenant

__all__ = ["MAX_ATTEMPTS_SHOWN", "check_policy", "effective_policy", "network_view"]

#: The most attempts ``GET /v1/sessions/{id}/network`` returns (the latest ones).
MAX_ATTEMPTS_SHOWN = 1000


def check_policy(tenant: Tenant, policy: NetworkPolicy | None, field: str = "network") -> None:
    """Refuse a policy whose allow entries go beyond the tenant's ceiling.

    Raises:
        InvalidInput: the first entry not covered, named with its index.
    """
    if policy is None:
        return
    ceiling = tenant.limits.network_ceiling
    for i, entry in enumerate(policy.allow):
        if not covers(ceiling, entry):
            raise InvalidInput(
                f"{field}.allow[{i}]: {entry!r} is beyond tenant {tenant.name!r}'s network "
                f"ceiling {ceiling}",
                operation="admission",
                context={
                    "field": f"{field}.allow[{i}]",
                    "rule": "within the tenant's network_ceiling",
                    "value": entry,
                },
            )


def effective_policy(tenant: Tenant, spec: SessionCreate) -> NetworkPolicy | None:
    """The policy a new session gets (its own, its type's, its tenant's, or none), checked.

    Raises:
        InvalidInput: the policy goes beyond the tenant's ceiling.
    """
    policy = spec.network or get_type(spec.type).default_network or tenant.limits.network_default
    check_policy(tenant, policy)
    return policy


def network_view(
    client: redis_lib.Redis[str],
    session_id: str,
    policy: NetworkPolicy | None,
    limit: int = MAX_ATTEMPTS_SHOWN,
) -> NetworkView:
    """The session's policy, usage, and its latest ``limit`` attempts, oldest first."""
    pipe = client.pipeline(transaction=False)
    pipe.xrevrange(names.egress_audit_key(session_id), count=limit)
    pipe.hgetall(names.egress_usage_key(session_id))
    entries, usage = pipe.execute()
    attempts = [NetworkAttempt.model_validate_json(fields["a"]) for _, fields in reversed(entries)]
    return NetworkView(
        policy=policy,
        connections=int(usage.get("connections", 0)),
        bytes=int(usage.get("bytes", 0)),
        attempts=attempts,
        limits=_limits(usage.get("limits")),
    )


def _limits(raw: str | None) -> EgressLimits:
    """The limits the session's node said it holds, else this grid's settings."""
    if raw:
        return EgressLimits.model_validate_json(raw)
    egress = get_settings().worker.egress
    return EgressLimits(
        handshake_timeout_s=egress.handshake_timeout_s,
        idle_timeout_s=egress.idle_timeout_s,
        max_open=egress.max_open,
    )
