"""The browser of a ``browser`` session: started on first use, found through the port route.

Chromium is not started with the sandbox (a pooled sandbox would hold a browser
no one asked for): the first CDP request or browser tool asks its DevTools port;
when nothing answers there, the image's launcher (``sandgrid.wire.browser.LAUNCHER``)
is started as a background process of the session, which starts Chromium and
starts it again whenever it dies. The request waits for the port to answer, at
most ``START_TIMEOUT_S``. A session that idled out of its sandbox comes back on
that start like on any turn, and gets a new browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool

from sandgrid.errors import ErrorCode, InvalidInput, PortUnreachable
from sandgrid.models import ExecRequest, SessionInfo
from sandgrid.wire.browser import CDP_PORT, HEAP_ENV, LAUNCHER, is_browser_type
from sandgrid.wire.portkeys import port_key
from scheduler.browser.cdp import CdpClient, CdpError, browser_path, cdp_session, json_version
from scheduler.browser.tools import attach_page
from scheduler.ports.tunnel import bare, live_session, open_stream
from scheduler.tenants import Tenant
from scheduler.turns.processes import start_process

if TYPE_CHECKING:  # the routes hand their services in; no import of the routes' layer
    from scheduler.api.deps import Services

__all__ = [
    "START_TIMEOUT_S",
    "browser_session",
    "ensure_browser",
    "heap_mb",
    "open_page",
    "tunnel",
]

#: How long a first request waits for Chromium to answer after starting it.
START_TIMEOUT_S = 60.0
_POLL_S = 0.25


def heap_mb(memory_mb: int) -> int:
    """Each page's V8 heap cap: a quarter of the session's memory, at least 32 MiB.

    A page that allocates without bound then dies alone (its renderer is
    killed, the tool says so) instead of taking the sandbox to its quota.
    """
    return max(32, memory_mb // 4)


def browser_session(svc: Services, tenant: Tenant, session_id: str) -> SessionInfo:
    """The tenant's open session, which must be of a browser type.

    Raises:
        NotFound: unknown, another tenant's, or closed.
        InvalidInput: its type has no browser (names the type).
    """
    info = live_session(svc.registry, tenant.name, session_id)
    if not is_browser_type(info.type):
        raise InvalidInput(
            f"session {session_id!r} is of type {info.type!r}, which has no browser: "
            "create it with type 'browser'",
            operation="browser",
            context={"field": "type", "rule": "a browser sandbox type", "value": info.type},
        )
    return info


async def tunnel(svc: Services, tenant: Tenant, session_id: str) -> socket.socket:
    """A fresh tunnel to the session's DevTools port (a connected socket)."""
    opened = await open_stream(
        svc.registry,
        tenant.name,
        session_id,
        CDP_PORT,
        key=port_key(svc.settings, "link"),
        timeout=svc.settings.ports.connect_timeout_s,
    )
    return bare(opened)


async def _version(svc: Services, tenant: Tenant, session_id: str) -> dict[str, Any]:
    return await json_version(await tunnel(svc, tenant, session_id), CDP_PORT)


async def ensure_browser(svc: Services, tenant: Tenant, session_id: str) -> dict[str, Any]:
    """The browser's ``/json/version`` answer, starting it first when none answers.

    Raises:
        NotFound, InvalidInput: as ``browser_session``.
        PortUnreachable: Chromium did not answer ``START_TIMEOUT_S`` after its start
            (``browser_unavailable``).
        SandgridError: the launcher's start failed (busy, closed, limits).
    """
    info = await run_in_threadpool(browser_session, svc, tenant, session_id)
    try:
        return await _version(svc, tenant, session_id)
    except PortUnreachable:
        pass
    env = {HEAP_ENV: str(heap_mb(info.quotas.memory_mb))}
    request = ExecRequest(argv=[LAUNCHER], env=env)
    await run_in_threadpool(start_process, svc.runner, tenant, session_id, request)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return await _version(svc, tenant, session_id)
        except PortUnreachable as exc:
            if time.monotonic() > deadline:
                raise PortUnreachable(
                    f"the browser of session {session_id} did not answer on port "
                    f"{CDP_PORT} within {START_TIMEOUT_S:g}s of its start",
                    code=ErrorCode.PORT_NOT_LISTENING,
                    operation="browser",
                    context={"port": CDP_PORT, "reason": "browser_unavailable"},
                ) from exc
        await asyncio.sleep(_POLL_S)


@contextlib.asynccontextmanager
async def open_page(
    svc: Services, tenant: Tenant, session_id: str
) -> AsyncIterator[tuple[CdpClient, str]]:
    """A CDP connection to the session's browser and its first page's CDP session id.

    Raises:
        as ``ensure_browser``; CdpError: the browser refused the page.
    """
    version = await ensure_browser(svc, tenant, session_id)
    sock = await tunnel(svc, tenant, session_id)
    async with cdp_session(sock, CDP_PORT, browser_path(version)) as cdp:
        page = await attach_page(cdp)
        try:
            yield cdp, page
        except CdpError:
            if cdp.crashed and cdp.page_target:  # a dead renderer's page answers nothing more
                with contextlib.suppress(CdpError):
                    await cdp.send("Target.closeTarget", {"targetId": cdp.page_target}, timeout=5)
            raise
