"""AgentScope's ``BrowserSandbox`` tools on the grid's ``browser`` type (issue 21.4).

agentscope-runtime's ``BrowserSandbox`` (and ``BrowserSandboxAsync``) call the
tools of the Playwright MCP server its own image runs (``browser_navigate``,
``browser_snapshot``, ``browser_click``, ``browser_type``,
``browser_take_screenshot``...) through ``/call_tool``. Here each is served
over CDP by ``scheduler.browser.tools`` on the session's Chromium, answered as
an MCP ``CallToolResult`` the runtime's client reads. Refs are the grid
snapshot's (``e<n>``), which the same client passes back unchanged. A tool the
grid does not serve is an error result naming the ones it does.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from scheduler.browser import tools
from scheduler.browser.cdp import CdpClient, CdpError
from scheduler.browser.launch import open_page
from scheduler.tenants import Tenant

if TYPE_CHECKING:
    from scheduler.api.deps import Services

__all__ = ["MAX_WAIT_S", "SERVED", "call_browser_tool"]

_Args = dict[str, Any]
_Tool = Callable[[CdpClient, str, _Args], Awaitable[list[dict[str, Any]]]]
#: The longest wait ``browser_wait_for`` takes (seconds).
MAX_WAIT_S = 30.0


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "annotations": None}


def _ref(args: _Args) -> str | None:
    return str(args.get("ref") or "") or None


async def _navigate(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    info = await tools.navigate(cdp, page, str(args.get("url") or ""))
    return [_text(f"Navigated to {info.get('url', '')}\nPage Title: {info.get('title', '')}")]


async def _snapshot(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    return [_text(await tools.snapshot(cdp, page))]


async def _click(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    await tools.click(cdp, page, ref=_ref(args), selector=None)
    return [_text(f"Clicked {args.get('element') or args.get('ref')}")]


async def _type(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    text = str(args.get("text") or "")
    submit = bool(args.get("submit"))
    await tools.type_text(cdp, page, text, ref=_ref(args), selector=None, submit=submit)
    return [_text(f"Typed {len(text)} characters into {args.get('element') or args.get('ref')}")]


async def _screenshot(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    png = await tools.screenshot(cdp, page)
    data = base64.b64encode(png).decode()
    return [{"type": "image", "data": data, "mimeType": "image/png", "annotations": None}]


async def _press_key(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    key = str(args.get("key") or "")
    if not key:
        raise CdpError("browser_press_key: name the key (e.g. Enter, ArrowDown, a)")
    text = "\r" if key == "Enter" else key if len(key) == 1 else ""
    for kind in ("keyDown", "keyUp"):
        event = {"type": kind, "key": key, **({"text": text} if text and kind == "keyDown" else {})}
        await cdp.send("Input.dispatchKeyEvent", event, session=page)
    return [_text(f"Pressed {key}")]


async def _history(cdp: CdpClient, page: str, step: int) -> list[dict[str, Any]]:
    history = await cdp.send("Page.getNavigationHistory", session=page)
    index = history["currentIndex"] + step
    entries = history["entries"]
    if not 0 <= index < len(entries):
        return [_text("No page to go to in the history")]
    await cdp.send("Page.navigateToHistoryEntry", {"entryId": entries[index]["id"]}, session=page)
    return [_text(f"Navigated to {entries[index]['url']}")]


async def _back(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    return await _history(cdp, page, -1)


async def _forward(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    return await _history(cdp, page, 1)


async def _wait_for(cdp: CdpClient, page: str, args: _Args) -> list[dict[str, Any]]:
    await asyncio.sleep(min(float(args.get("time") or 0.0), MAX_WAIT_S))
    return [_text("Waited")]


#: The BrowserSandbox tools the grid serves.
SERVED: dict[str, _Tool] = {
    "browser_navigate": _navigate,
    "browser_snapshot": _snapshot,
    "browser_click": _click,
    "browser_type": _type,
    "browser_take_screenshot": _screenshot,
    "browser_press_key": _press_key,
    "browser_navigate_back": _back,
    "browser_navigate_forward": _forward,
    "browser_wait_for": _wait_for,
}


def _result(content: list[dict[str, Any]], *, error: bool) -> dict[str, Any]:
    return {"meta": None, "content": content, "isError": error}


async def call_browser_tool(
    svc: Services, tenant: Tenant, identity: str, name: str, arguments: _Args
) -> dict[str, Any]:
    """Run one ``browser_*`` tool on the session's browser; an MCP ``CallToolResult``.

    A browser failure (a refused load, no such element) is an error result, as
    the runtime's own server answers; a grid error (unknown session, a session
    of another type) is raised for the route to answer as the API does.
    """
    tool = SERVED.get(name)
    if tool is None:
        served = ", ".join(sorted(SERVED))
        return _result(
            [_text(f"tool {name!r} is not served by sandgrid: {served} are")], error=True
        )
    try:
        async with open_page(svc, tenant, identity) as (cdp, page):
            return _result(await tool(cdp, page, arguments), error=False)
    except CdpError as exc:
        return _result([_text(f"Error: {exc}")], error=True)
