"""Routes of a session's network egress: see its policy and audit, change its policy.

``PATCH`` holds for the session's next connection: the worker's egress proxy
reads the policy from the session record on every connection.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from sandgrid.errors import Conflict, ErrorCode
from sandgrid.models import NetworkPolicy, NetworkView, SessionInfo
from scheduler.api.deps import CurrentTenant, Svc
from scheduler.network import MAX_ATTEMPTS_SHOWN, check_policy, network_view

__all__ = ["get_network", "router", "set_network"]

router = APIRouter(prefix="/v1/sessions", tags=["network"])


@router.get("/{session_id}/network", response_model=NetworkView)
def get_network(
    session_id: str,
    svc: Svc,
    tenant: CurrentTenant,
    limit: Annotated[int, Query(ge=1, le=MAX_ATTEMPTS_SHOWN)] = MAX_ATTEMPTS_SHOWN,
) -> NetworkView:
    """The session's policy, its usage, and its latest connection attempts (oldest first)."""
    info = svc.registry.get(tenant.name, session_id)
    return network_view(svc.redis, session_id, info.network, limit)


@router.patch("/{session_id}/network", response_model=SessionInfo)
def set_network(
    session_id: str, policy: NetworkPolicy, svc: Svc, tenant: CurrentTenant
) -> SessionInfo:
    """Replace the session's policy (within the tenant's ceiling); the next connection
    obeys it. ``{"allow": []}`` refuses everything from now on."""
    info = svc.registry.get(tenant.name, session_id)
    if info.state == "closed":
        raise Conflict(
            f"session {session_id!r} is closed",
            code=ErrorCode.SESSION_CLOSED,
            operation="sessions.network",
        )
    check_policy(tenant, policy)
    svc.registry.update(session_id, network=policy.model_dump(mode="json"))
    if svc.audit is not None:
        svc.audit.policy(tenant.name, session_id, policy.model_dump(mode="json"))
    updated = svc.registry.get(tenant.name, session_id)
    svc.registry.save_record(updated)
    return updated
