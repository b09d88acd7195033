"""``GET /metrics`` (Prometheus) and ``GET /v1/nodes`` (where each node's metrics are).

Neither needs a token, like ``/v1/health``: they reveal counts, timings and
node names, nothing of a tenant's data. Put the API behind a proxy that keeps
``/metrics`` internal when that matters (docs/operations.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler.api.deps import Svc

__all__ = ["metrics", "nodes", "router"]

router = APIRouter(tags=["operations"])


@router.get("/metrics", include_in_schema=False)
def metrics() -> Response:
    """The API process's metrics in Prometheus's text format."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/nodes")
def nodes(svc: Svc) -> dict[str, Any]:
    """The live worker nodes: the types each serves and the URL of its ``/metrics``.

    Prometheus discovers the same URLs from ``GET /v1/metrics/targets``
    (``scheduler.api.targets``: ``http_sd`` format, behind the metrics token).
    """
    out = []
    for name, rec in sorted(svc.registry.node_records().items()):
        url = None
        if rec.metrics_port:
            url = f"http://{rec.metrics_host or '127.0.0.1'}:{rec.metrics_port}/metrics"
        out.append({"name": name, "types": list(rec.types or ()), "metrics_url": url})
    return {"nodes": out}
