"""``GET /v1/metrics/targets``: Prometheus HTTP service discovery of the worker nodes.

Each node's heartbeat names the port (and host) of its ``/metrics``, and two
nodes on one host never share one (the second falls back to a free port), so
a static scrape list goes stale: ``make up``'s second worker was never
scraped (issue 23.18). Prometheus's ``http_sd_configs`` reads this route
instead: one target group per live node, in the format Prometheus documents
(``[{"targets": ["host:port"], "labels": {...}}]``, ``application/json``).

It is an operator's route, not a tenant's: a tenant's token is refused. It
takes the bearer token of the file ``SANDGRID_METRICS_TOKEN_FILE`` names
(Prometheus sends it with ``authorization: {credentials_file: ...}``); with no
such file configured every call is refused. The file is read on each call, so
a rotated token applies at once; it is compared in constant time.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from scheduler.api.deps import Svc
from scheduler.api.operator_token import check_file_token

__all__ = ["TargetGroup", "metrics_targets", "require_metrics_token", "router"]

router = APIRouter(tags=["operations"])

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="MetricsToken",
    description="the operator's metrics token (the file SANDGRID_METRICS_TOKEN_FILE names)",
)


class TargetGroup(BaseModel):
    """One group of Prometheus's HTTP service discovery: a node's ``/metrics``."""

    targets: list[str] = Field(description="host:port of the node's /metrics")
    labels: dict[str, str] = Field(description="node (its name), __metrics_path__")


def require_metrics_token(
    svc: Svc,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse a caller without the metrics token (401).

    Raises:
        AuthError: no token, a wrong one, or none configured.
    """
    given = creds.credentials if creds else ""
    check_file_token(
        given,
        svc.settings.metrics_token_file,
        setting="SANDGRID_METRICS_TOKEN_FILE",
        operation="metrics",
    )


@router.get(
    "/v1/metrics/targets",
    response_model=list[TargetGroup],
    dependencies=[Depends(require_metrics_token)],
)
def metrics_targets(svc: Svc) -> list[TargetGroup]:
    """Every live node's ``/metrics`` as a target group (Prometheus ``http_sd_configs``).

    A node whose heartbeat names no port (an older worker) is left out.
    """
    groups = []
    for name, rec in sorted(svc.registry.node_records().items()):
        if rec.metrics_port:
            host = rec.metrics_host or "127.0.0.1"
            if ":" in host:
                host = f"[{host}]"  # an IPv6 address
            groups.append(
                TargetGroup(
                    targets=[f"{host}:{rec.metrics_port}"],
                    labels={"node": name, "__metrics_path__": "/metrics"},
                )
            )
    return groups
