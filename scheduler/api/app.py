"""The FastAPI application factory (``uvicorn --factory scheduler.api:create_app``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from sandgrid.wire.settings import Settings, get_settings
from scheduler.api import agentscope, batches, files, health, sessions, types
from scheduler.api.deps import Services
from scheduler.api.errors import EdgeMiddleware, install_error_handlers
from scheduler.dispatch import Dispatcher

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

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Sync handlers wait on turns in threads: allow as many as configured.
        anyio.to_thread.current_default_thread_limiter().total_tokens = s.api_threads
        yield
        if svc.batches is not None:
            svc.batches.shutdown()
        svc.redis.close()

    app = FastAPI(
        title="sandgrid",
        version=API_VERSION,
        description="Sandboxed execution for AI agents: sessions, exec, files, batches.",
        lifespan=lifespan,
    )
    app.state.services = svc
    app.add_middleware(EdgeMiddleware, max_body_bytes=s.max_body_bytes)
    install_error_handlers(app)
    app.include_router(sessions.router)
    app.include_router(files.router)
    app.include_router(health.router)
    app.include_router(batches.router)
    app.include_router(types.router)
    app.include_router(agentscope.router)
    return app
