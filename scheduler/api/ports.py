"""Routes of exposed ports (issue 21.1, docs/ports.md): a session's sandbox ports over HTTP.

- ``GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS /v1/sessions/{id}/ports/{port}/{path}``
  and a WebSocket on the same path: with the tenant's token (``Authorization:
  Bearer``; for a WebSocket from a browser also the subprotocol
  ``sandgrid.bearer.<token>``), relayed to ``port`` on the sandbox's loopback.
- ``POST /v1/sessions/{id}/ports/{port}/url``: a signed preview URL
  (``PortUrlRequest`` -> ``PortUrl``). An app's own ``POST /url`` is reached
  through a preview URL.
- ``DELETE /v1/sessions/{id}/ports/urls[?port=N]``: revoke every preview URL of
  the session (of port N) made so far (``PortUrlsRevoked``); ``urls`` is no port
  number, so no app's path is shadowed.
- ``/p/{token}/{path}`` (HTTP and WebSocket): the same relay with no token but
  the signed one; ``/p/{token}`` redirects to ``/p/{token}/`` so that relative
  links resolve.

Every error is the API's JSON body: 422 (a port outside 1-65535 or reserved),
403 (a preview token forged, expired, revoked, or read-only), 404 (unknown, another
tenant's, closed), 429 (``port_limit``), 502 (``port_not_listening``), 503
(the owner did not answer).
"""

from __future__ import annotations

import socket
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Path, Query, Request, WebSocket
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from sandgrid.errors import SandgridError
from sandgrid.models import ExecRequest
from sandgrid.ops.ports import MAX_PORT, MIN_PORT, PortUrl, PortUrlRequest, PortUrlsRevoked
from sandgrid.wire.portkeys import port_key
from sandgrid.wire.preview import ALL_PORTS
from scheduler.api.deps import CurrentTenant, Services, Svc
from scheduler.api.pty import ws_tenant
from scheduler.ports.forward import Opener, forward_http
from scheduler.ports.previews import PREVIEW_PREFIX, QUERY_TOKEN, admit, check, make_url
from scheduler.ports.tunnel import (
    Admit,
    Wake,
    bare,
    check_port,
    forget,
    live_session,
    open_stream,
)
from scheduler.ports.websocket import refuse, relay_websocket

__all__ = [
    "METHODS",
    "WAKE_SHELL",
    "OnePort",
    "PortNumber",
    "PreviewQuery",
    "port_route",
    "port_socket",
    "port_url",
    "preview_root",
    "preview_route",
    "preview_socket",
    "revoke_port_urls",
    "router",
]

router = APIRouter(tags=["ports"])
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: The wake turn's command: it does nothing; the turn itself brings the sandbox back.
WAKE_SHELL = "true"
PortNumber = Annotated[int, Path(ge=1, le=65535, description="a TCP port on the sandbox loopback")]
OnePort = Annotated[
    int | None,
    Query(ge=MIN_PORT, le=MAX_PORT, description="revoke this port's URLs only (absent: all)"),
]


def _reserved(svc: Services) -> frozenset[int]:
    return frozenset({svc.settings.worker.egress.port})


async def _relay(
    request: Request,
    svc: Services,
    where: tuple[str, str, int],
    prefix: str,
    path: str,
    admit: Admit | None = None,
) -> Response:
    tenant, session_id, port = where
    check_port(port, _reserved(svc))
    opener = _opener(svc, tenant, session_id, port, admit)
    return await forward_http(request, opener, port, prefix, path)


def _waker(svc: Services, tenant: str, session_id: str) -> Wake:
    """A turn of the session (``true``): it brings a session that runs nowhere back
    into a sandbox, on whichever node takes it (with its memory image when paused
    with memory; else its workspace, and its servers are to be started again)."""

    async def wake() -> None:
        owner = await run_in_threadpool(svc.tenants.get, tenant)
        await run_in_threadpool(svc.runner.exec, owner, session_id, ExecRequest(shell=WAKE_SHELL))

    return wake


@router.post("/v1/sessions/{session_id}/ports/{port}/url", response_model=PortUrl)
def port_url(
    session_id: str,
    port: PortNumber,
    request: Request,
    svc: Svc,
    tenant: CurrentTenant,
    body: PortUrlRequest | None = None,
) -> PortUrl:
    """A signed preview URL of the port: it works without the token until it expires
    or the session closes; ``read_only`` allows only GET and HEAD."""
    check_port(port, _reserved(svc))
    info = live_session(svc.registry, tenant.name, session_id)
    key = port_key(svc.settings, "preview")
    base = str(request.base_url)
    asked = body or PortUrlRequest()
    epochs = info.port_url_epochs
    return make_url(key, svc.settings.ports, tenant.name, session_id, port, asked, base, epochs)


@router.delete("/v1/sessions/{session_id}/ports/urls", response_model=PortUrlsRevoked)
def revoke_port_urls(
    session_id: str, svc: Svc, tenant: CurrentTenant, port: OnePort = None
) -> PortUrlsRevoked:
    """Revoke every preview URL of the session made so far (of ``port`` only, when
    given): each answers 403 ``url_revoked`` from now on; a URL made after works."""
    if port is not None:
        check_port(port, _reserved(svc))
    info = live_session(svc.registry, tenant.name, session_id)
    epochs = svc.registry.revoke_port_urls(session_id, port)
    forget(tenant.name, session_id)
    if svc.audit is not None:
        detail = {"port": ALL_PORTS if port is None else port}
        svc.audit.event(tenant.name, session_id, "port_urls_revoke", detail=detail)
    svc.registry.save_record(info.model_copy(update={"port_url_epochs": epochs}))
    return PortUrlsRevoked(session=session_id, port=port, epochs=epochs)


async def port_route(
    session_id: str,
    port: PortNumber,
    request: Request,
    svc: Svc,
    tenant: CurrentTenant,
    path: str = "",
) -> Response:
    """Relay the request to ``port`` on the session's sandbox loopback, streamed."""
    prefix = f"/v1/sessions/{session_id}/ports/{port}"
    return await _relay(request, svc, (tenant.name, session_id, port), prefix, path)


@router.websocket("/v1/sessions/{session_id}/ports/{port}/{path:path}")
async def port_socket(websocket: WebSocket, session_id: str, port: int, path: str = "") -> None:
    """Relay a WebSocket to ``port`` on the session's sandbox loopback."""
    svc: Services = websocket.app.state.services
    try:
        offered = list(websocket.scope.get("subprotocols") or [])
        tenant = await ws_tenant(websocket, svc, offered, operation="ports")
        check_port(port, _reserved(svc))
        sock = await _tunnel(svc, tenant.name, session_id, port)
    except SandgridError as exc:
        await refuse(websocket, exc)
        return
    await relay_websocket(websocket, sock, port, path)


def _opener(
    svc: Services, tenant: str, session_id: str, port: int, admit: Admit | None = None
) -> Opener:
    """Opens a tunnel to the port with the given first bytes (``open_stream``)."""

    async def opener(early: bytes) -> tuple[socket.socket, bytes]:
        return await open_stream(
            svc.registry,
            tenant,
            session_id,
            port,
            key=port_key(svc.settings, "link"),
            timeout=svc.settings.ports.connect_timeout_s,
            wake=_waker(svc, tenant, session_id),
            admit=admit,
            early=early,
        )

    return opener


async def _tunnel(
    svc: Services, tenant: str, session_id: str, port: int, admit: Admit | None = None
) -> socket.socket:
    return bare(await _opener(svc, tenant, session_id, port, admit)(b""))


@router.api_route("/p/{token}", methods=METHODS, include_in_schema=False)
async def preview_root(token: str) -> Response:
    """``/p/<token>`` -> ``/p/<token>/``: relative links of the page resolve under it."""
    return RedirectResponse(f"{PREVIEW_PREFIX}{token}/", status_code=308)


async def preview_route(token: str, path: str, request: Request, svc: Svc) -> Response:
    """Relay the request as the signed preview URL allows; no tenant token is read."""
    preview = check(port_key(svc.settings, "preview"), token, request.method)
    prefix = f"{PREVIEW_PREFIX}{token}"
    where = (preview.tenant, preview.session, preview.port)
    return await _relay(request, svc, where, prefix, path, admit(preview))


@router.websocket("/p/{token}/{path:path}")
async def preview_socket(websocket: WebSocket, token: str, path: str = "") -> None:
    """A WebSocket through the signed preview URL (an open is a GET: read-only allows it)."""
    svc: Services = websocket.app.state.services
    try:
        preview = check(port_key(svc.settings, "preview"), token, "GET")
        sock = await _tunnel(svc, preview.tenant, preview.session, preview.port, admit(preview))
    except SandgridError as exc:
        await refuse(websocket, exc)
        return
    await relay_websocket(websocket, sock, preview.port, path)


class PreviewQuery:
    """``<any path>?sg_preview=<token>`` is served as ``/p/<token>/<path>`` (the query less it).

    The Agents SDK's ``ExposedPortEndpoint`` is a host, a port and a query; its
    URL is ``http://<api>/?sg_preview=<token>``: this makes that URL, and any
    path with the parameter, a preview. The API's own routes never take it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and QUERY_TOKEN.encode() in scope.get(
            "query_string", b""
        ):
            pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            token = next((v for k, v in pairs if k == QUERY_TOKEN), "")
            if token and "/" not in token:
                rest = urlencode([(k, v) for k, v in pairs if k != QUERY_TOKEN])
                path = f"{PREVIEW_PREFIX}{token}/{scope['path'].lstrip('/')}"
                scope = {
                    **scope,
                    "path": path,
                    "raw_path": path.encode(),
                    "query_string": rest.encode(),
                }
        await self.app(scope, receive, send)


def _add_routes() -> None:
    """One route per method (an operation id each in the OpenAPI document)."""
    for method in METHODS:
        low = method.lower()
        path = "/v1/sessions/{session_id}/ports/{port}"
        router.add_api_route(path, port_route, methods=[method], include_in_schema=False)
        router.add_api_route(
            path + "/{path:path}", port_route, methods=[method], operation_id=f"port_{low}"
        )
        router.add_api_route(
            "/p/{token}/{path:path}", preview_route, methods=[method], operation_id=f"preview_{low}"
        )


_add_routes()
