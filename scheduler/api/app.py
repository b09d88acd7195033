"""The FastAPI application factory (``uvicorn --factory scheduler.api:create_app``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI

from sandgrid.wire.settings import Settings, get_settings
from scheduler.api import (
    audit,
    batches,
    files,
    health,
    lifecycle,
    ops,
    sessions,
    stream,
    targets,
    types,
)
from scheduler.api import browser as browser_api
from scheduler.api import code as code_api
from scheduler.api import fork as fork_api
from scheduler.api import network as network_api
from scheduler.api import ports as ports_api
from scheduler.api import processes as background
from scheduler.api import pty as pty_api
from scheduler.api import templates as templates_api
from scheduler.api.compat import agentscope, mcp
from scheduler.api.deps import Services
from scheduler.api.errors import EdgeMiddleware, install_error_handlers
from scheduler.api.responses import document_errors
from scheduler.expiry import Expiry
from scheduler.token_watch import TokenWatch
from scheduler.turns.dispatch import Dispatcher

__all__ = ["API_VERSION", "create_app"]

API_VERSION = "1"


def create_app(
    settings: Settings | None = None,
    *,
    dispatcher: Dispatcher | None = None,
    services: Services | None = None,
) -> FastAPI:
    """Build the API.

    Args:
        settings: the process settings; ``get_settings()`` when omitted.
        dispatcher: how turns reach workers; Celery when omitted (tests pass a fake).
        services: fully built services (tests); built from ``settings`` otherwise.
    """
    s = settings or get_settings()
    svc = services or Services.build(s, dispatcher=dispatcher)
    expiry = Expiry(svc.redis, svc.registry, svc.runner, interval_s=s.session_sweep_s)
    token_watch = TokenWatch(svc.redis, svc.tenants.forget)  # 23.16: rotate/revoke at once
    mcp_lifespan: Callable[[], Any]  # bound below, when /mcp is mounted among the routes

    app = FastAPI(
        title="sandgrid",
        version=API_VERSION,
        description="Sandboxed execution for AI agents: sessions, exec, files, batches.",
        lifespan=lambda _: _lifespan(s, svc, expiry, token_watch, mcp_lifespan),
    )
    app.state.services = svc
    app.state.expiry = expiry
    app.add_middleware(
        EdgeMiddleware, max_body_bytes=s.max_body_bytes, jsonrpc_paths=frozenset({mcp.MCP_PATH})
    )
    app.add_middleware(ports_api.PreviewQuery)  # issue 21.1: ?sg_preview=<token> on any path
    install_error_handlers(app)
    mcp_lifespan = _include_routes(app, svc)
    document_errors(app)
    return app


@asynccontextmanager
async def _lifespan(
    s: Settings,
    svc: Services,
    expiry: Expiry,
    token_watch: TokenWatch,
    mcp_lifespan: Callable[[], Any],
) -> AsyncIterator[None]:
    """The app's background parts, started before it serves and stopped after."""
    # Sync handlers wait on turns in threads: allow as many as configured.
    anyio.to_thread.current_default_thread_limiter().total_tokens = s.api_threads
    if svc.audit_exporter is not None:
        svc.audit_exporter.start()
    if svc.types is not None:  # 25.1: the types file, seeded into the registry
        types.seed_types(svc.types, s.types_file)
    svc.registry.serving.prime()  # 22.5: the primary as the API starts
    expiry.start()
    token_watch.start()
    async with mcp_lifespan():  # the MCP transport's task group lives as long as the app
        yield
    token_watch.stop()
    expiry.stop()
    if svc.audit_exporter is not None:
        svc.audit_exporter.stop()
    if svc.batches is not None:
        svc.batches.shutdown()
    svc.redis.close()


def _include_routes(app: FastAPI, svc: Services) -> Callable[[], Any]:
    """Every router, in the order they match; returns what the lifespan enters for MCP."""
    app.include_router(sessions.router)
    # issue 21: second, not last: the routers are tried in turn, and the port route's
    # requests (a page's many small files) paid ~0.25 ms matching the ones before it.
    # Its paths (/v1/sessions/{id}/ports/..., /p/...) are no other router's.
    app.include_router(ports_api.router)
    app.include_router(files.router)
    app.include_router(health.router)
    app.include_router(batches.router)
    app.include_router(types.router)
    app.include_router(templates_api.router)  # 25.2
    app.include_router(ops.router)
    app.include_router(audit.router)
    app.include_router(code_api.router)
    mcp_lifespan = mcp.mount(app, svc)
    app.include_router(pty_api.router)
    app.include_router(lifecycle.router)
    app.include_router(fork_api.router)  # 24.2
    app.include_router(stream.router)
    app.include_router(background.router)
    app.include_router(network_api.router)
    app.include_router(agentscope.router)
    app.include_router(targets.router)
    app.include_router(browser_api.router)  # issue 21.3
    return mcp_lifespan
