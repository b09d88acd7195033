"""The MCP server's browser tools, for sessions of the ``browser`` type (docs/browser.md).

``browser_navigate``, ``browser_screenshot`` (an image content block, PNG),
``browser_click``, ``browser_type`` and ``browser_snapshot`` (the page's
accessibility tree, each element with a ``ref`` that click and type take).
They drive the session's Chromium over CDP through the port route's tunnel
(``scheduler.browser``), starting it on first use; a session of another type
is a tool error naming ``type``. Registered by ``scheduler.api.compat.mcp``,
which hands in how it finds the tenant and words errors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from sandgrid.errors import SandgridError
from scheduler.api.deps import Services
from scheduler.browser import tools
from scheduler.browser.cdp import CdpClient, CdpError
from scheduler.browser.launch import open_page
from scheduler.tenants import Tenant

__all__ = ["register"]

T = TypeVar("T")
_SessionId = Annotated[str, Field(description="the browser session's id (s-...)")]
_Ref = Annotated[str | None, Field(description="the element's ref from browser_snapshot (e...)")]
_Selector = Annotated[str | None, Field(description="or a CSS selector of the element")]
_Element = Annotated[str | None, Field(description="what the element is, in words (for logs)")]


def register(
    server: MCPServer,
    svc: Services,
    tenant_of: Callable[[Context], Tenant],
    to_error: Callable[[Exception], ToolError],
) -> None:
    """Add the browser tools to ``server``."""
    actor = _Actor(svc, tenant_of, to_error)
    _register_page_tools(server, actor)
    _register_element_tools(server, actor)


class _Actor:
    """Runs a tool's body on the session's page, its errors in the API's words."""

    def __init__(
        self,
        svc: Services,
        tenant_of: Callable[[Context], Tenant],
        to_error: Callable[[Exception], ToolError],
    ) -> None:
        self._svc = svc
        self._tenant_of = tenant_of
        self._to_error = to_error

    async def act(
        self, ctx: Context, session_id: str, body: Callable[[CdpClient, str], Awaitable[T]]
    ) -> T:
        tenant = self._tenant_of(ctx)
        try:
            async with open_page(self._svc, tenant, session_id) as (cdp, page):
                return await body(cdp, page)
        except CdpError as exc:
            raise ToolError(f"browser_error: {exc}") from exc
        except (SandgridError, ValidationError) as exc:  # in the API's words
            raise self._to_error(exc) from exc


def _register_page_tools(server: MCPServer, actor: _Actor) -> None:
    """The tools on the page as a whole: navigate, screenshot."""
    act = actor.act

    @server.tool()
    async def browser_navigate(
        ctx: Context,
        session_id: _SessionId,
        url: Annotated[str, Field(description="the URL to load", min_length=1, max_length=8192)],
    ) -> dict[str, Any]:
        """Load a URL in the session's browser; its final URL and title."""
        return await act(ctx, session_id, lambda cdp, page: tools.navigate(cdp, page, url))

    @server.tool()
    async def browser_screenshot(
        ctx: Context,
        session_id: _SessionId,
        full_page: Annotated[bool, Field(description="the whole page, not the viewport")] = False,
    ) -> Image:
        """A PNG screenshot of the page, as an image."""
        png = await act(
            ctx, session_id, lambda cdp, page: tools.screenshot(cdp, page, full_page=full_page)
        )
        return Image(data=png, format="png")


def _register_element_tools(server: MCPServer, actor: _Actor) -> None:
    """The tools on the page's elements: click and type (by ref or CSS selector), and the
    snapshot that lists them with their refs."""
    act = actor.act

    @server.tool()
    async def browser_click(
        ctx: Context,
        session_id: _SessionId,
        ref: _Ref = None,
        selector: _Selector = None,
        element: _Element = None,
    ) -> dict[str, Any]:
        """Click an element (by ref from browser_snapshot, or by CSS selector)."""

        async def body(cdp: CdpClient, page: str) -> dict[str, Any]:
            await tools.click(cdp, page, ref=ref, selector=selector)
            return {"clicked": ref or selector}

        return await act(ctx, session_id, body)

    @server.tool()
    async def browser_type(
        ctx: Context,
        session_id: _SessionId,
        text: Annotated[str, Field(description="the text to type", max_length=1 << 16)],
        ref: _Ref = None,
        selector: _Selector = None,
        element: _Element = None,
        submit: Annotated[bool, Field(description="press Enter after")] = False,
    ) -> dict[str, Any]:
        """Type text into an element (by ref or CSS selector); optionally press Enter."""

        async def body(cdp: CdpClient, page: str) -> dict[str, Any]:
            await tools.type_text(cdp, page, text, ref=ref, selector=selector, submit=submit)
            return {"typed": len(text), "into": ref or selector}

        return await act(ctx, session_id, body)

    @server.tool()
    async def browser_snapshot(ctx: Context, session_id: _SessionId) -> str:
        """The page's accessibility tree: one line per element, with refs to act on."""
        return await act(ctx, session_id, tools.snapshot)
