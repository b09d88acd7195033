"""``GET /metrics`` (Prometheus) and ``GET /v1/nodes`` (where each node's metrics are).

Neither needs a token, like ``/v1/health``: they reveal counts, timings and
node names, nothing of a tenant's data. Put the API behind a proxy that keeps
``/metrics`` internal when that matters (docs/operations.md). A tenant's private
types (its templates) are named to the operator alone: without the admin token
``/v1/nodes`` gives each node's public types and a count of the others.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sandgrid.wire import catalog
from scheduler.api.deps import Svc
from scheduler.api.operator_token import file_token_matches
from scheduler.api.types import Creds

__all__ = ["metrics", "nodes", "router"]

router = APIRouter(tags=["operations"])


@router.get("/metrics", include_in_schema=False)
def metrics() -> Response:
    """The API process's metrics in Prometheus's text format."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/nodes")
def nodes(svc: Svc, creds: Creds) -> dict[str, Any]:
    """The live worker nodes: the types each serves and the URL of its ``/metrics``.

    Private types are listed with the admin token only; otherwise each node
    says how many it serves (``private_types``). Prometheus discovers the same
    URLs from ``GET /v1/metrics/targets`` (``scheduler.api.targets``: ``http_sd``
    format, behind the metrics token).
    """
    operator = creds is not None and file_token_matches(
        creds.credentials, svc.settings.admin_token_file
    )
    types = catalog.current()
    out = []
    for name, rec in sorted(svc.registry.node_records().items()):
        url = None
        if rec.metrics_port:
            url = f"http://{rec.metrics_host or '127.0.0.1'}:{rec.metrics_port}/metrics"
        served = list(rec.types or ())
        shown = served if operator else [t for t in served if _public(types, t)]
        out.append(
            {
                "name": name,
                "types": shown,
                "private_types": len(served) - len(shown),
                "metrics_url": url,
            }
        )
    return {"nodes": out}


def _public(types: catalog.Catalog, name: str) -> bool:
    """Whether every tenant may use the type ``name`` (a removed one is not named)."""
    spec = types.get(name)
    return spec is not None and spec.tenant is None
