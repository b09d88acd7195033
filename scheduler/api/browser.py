"""Route of the browser sandbox type (issue 21.3, docs/browser.md): ``GET /v1/sessions/{id}/cdp``.

It starts the session's Chromium when none answers (``scheduler.browser.launch``)
and answers where its DevTools WebSocket is reached through the port route
(``/v1/sessions/{id}/ports/9222/devtools/browser/<id>``, the tenant's token
in ``Authorization``), or with ``signed=true`` through a signed preview URL
that needs no token and stops working at ``expires_in``, when the session
closes, or when its port URLs are revoked. A session of another type is 422 naming ``type``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from sandgrid.ops.browser import CdpEndpoint
from sandgrid.ops.ports import PortUrlRequest
from sandgrid.wire.browser import CDP_PORT
from sandgrid.wire.portkeys import port_key
from scheduler.api.deps import CurrentTenant, Svc
from scheduler.browser.cdp import browser_path
from scheduler.browser.launch import ensure_browser
from scheduler.ports.previews import make_url
from scheduler.ports.tunnel import live_session

__all__ = ["cdp_endpoint", "router"]

router = APIRouter(tags=["browser"])


def _ws(url: str) -> str:
    return "ws" + url[len("http") :] if url.startswith("http") else url


@router.get("/v1/sessions/{session_id}/cdp", response_model=CdpEndpoint)
async def cdp_endpoint(
    session_id: str,
    request: Request,
    svc: Svc,
    tenant: CurrentTenant,
    signed: Annotated[bool, Query(description="a signed URL that needs no token")] = False,
    expires_in: Annotated[
        int | None, Query(ge=1, description="seconds a signed URL works (with signed)")
    ] = None,
) -> CdpEndpoint:
    """The session's browser CDP endpoint; the browser is started on first use."""
    version = await ensure_browser(svc, tenant, session_id)
    devtools = browser_path(version)
    base = str(request.base_url).rstrip("/")
    root = f"{base}/v1/sessions/{session_id}/ports/{CDP_PORT}"
    ws_url, expires_at = _ws(root + devtools), None
    if signed:  # under the session's URL epochs now (a revocation ends it too)
        info = await run_in_threadpool(live_session, svc.registry, tenant.name, session_id)
        url = make_url(
            port_key(svc.settings, "preview"),
            svc.settings.ports,
            tenant.name,
            session_id,
            CDP_PORT,
            PortUrlRequest(expires_in=expires_in),
            base,
            info.port_url_epochs,
        )
        ws_url, expires_at = _ws(url.url.rstrip("/") + devtools), url.expires_at
    return CdpEndpoint(
        websocket_url=ws_url,
        http_url=root + "/",
        port=CDP_PORT,
        browser=str(version.get("Browser", "")),
        protocol_version=str(version.get("Protocol-Version", "")),
        signed=signed,
        expires_at=expires_at,
    )
