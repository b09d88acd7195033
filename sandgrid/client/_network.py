"""The requests of a session's network egress routes (docs/network.md): one builder a call.

A policy is given as a ``NetworkPolicy`` or as the mapping the REST API takes
(``{"allow": ["pypi.org:443"], "deny": [...]}``), and validated client-side by
the model (an ``InvalidInput`` naming the entry before any round trip). The
tenant's ceiling is the API's to check: a policy beyond it is a 422 from the API.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from sandgrid.client._call import Call, parse_as
from sandgrid.errors import InvalidInput
from sandgrid.models import NetworkPolicy, NetworkView, SessionInfo

__all__ = ["NetworkPolicyLike", "network", "network_policy", "set_network"]

#: A policy as the SDK takes it: the model, or the mapping of its fields.
NetworkPolicyLike = NetworkPolicy | Mapping[str, Any]


def network_policy(policy: NetworkPolicyLike, field: str = "network") -> NetworkPolicy:
    """``policy`` as a validated ``NetworkPolicy``.

    Raises:
        InvalidInput: an entry or a field breaks a rule; ``field`` names where it was.
    """
    if isinstance(policy, NetworkPolicy):
        return policy
    if not isinstance(policy, Mapping):
        raise InvalidInput(
            f"{field}: a network policy is a mapping such as {{'allow': ['pypi.org:443']}}, "
            f"not {type(policy).__name__}",
            operation="network",
            context={"field": field, "rule": "a NetworkPolicy or a mapping"},
        )
    try:
        return NetworkPolicy.model_validate(dict(policy))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join([field, *(str(p) for p in first["loc"])])
        rule = first["msg"].removeprefix("Value error, ")
        raise InvalidInput(
            rule if rule.startswith(f"{field}.") else f"{where}: {rule}",
            operation="network",
            context={"field": where, "rule": rule},
        ) from exc


def network(session_id: str, *, limit: int | None = None) -> Call[NetworkView]:
    """The session's network policy (None: offline), its usage (``connections``,
    ``bytes``) and its latest connection attempts, oldest first (at most ``limit``)."""
    params = {"limit": limit} if limit is not None else None
    path = f"/v1/sessions/{session_id}/network"
    return Call("GET", path, parse_as(NetworkView), params=params)


def set_network(session_id: str, policy: NetworkPolicyLike) -> Call[SessionInfo]:
    """Replace the session's network policy (within the tenant's ceiling): its next
    connection obeys it; ``{"allow": []}`` refuses everything from now on. Safe to
    send again: the same policy twice is the same policy."""
    body = network_policy(policy).model_dump(mode="json", exclude_defaults=True)
    path = f"/v1/sessions/{session_id}/network"
    return Call("PATCH", path, parse_as(SessionInfo), json=body, idempotent=True)
