"""``GET /v1/health``: is Redis reachable, which workers have a live heartbeat."""

from __future__ import annotations

from typing import Any

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from scheduler.api.deps import Svc

__all__ = ["health", "router"]

router = APIRouter(tags=["health"])


@router.get(
    "/v1/health",
    responses={503: {"description": "Redis unreachable: the same body, status unavailable"}},
)
def health(svc: Svc) -> JSONResponse:
    """200 with the live workers when Redis answers; 503 when it does not.

    No token needed: it reveals only node names, for load balancers and scripts.
    """
    body: dict[str, Any] = {"status": "ok", "redis": True, "workers": []}
    try:
        svc.redis.ping()
        body["workers"] = svc.registry.live_nodes()
    except redis.RedisError as exc:
        body.update(status="unavailable", redis=False, error=str(exc))
        return JSONResponse(body, status_code=503)
    if not body["workers"]:
        body["status"] = "no_workers"
    return JSONResponse(body)
