"""The browser sandbox type (issue 21.3): the answer of ``GET /v1/sessions/{id}/cdp``.

The browser's DevTools Protocol is reached through the port route (docs/browser.md):
this says where, so that ``playwright.chromium.connect_over_cdp(websocket_url,
headers={"Authorization": "Bearer <token>"})``, or any CDP client, drives it.
"""

from __future__ import annotations

from pydantic import Field

from sandgrid.models import WireModel

__all__ = ["CdpEndpoint"]


class CdpEndpoint(WireModel):
    """Where a session's browser speaks CDP, through the API."""

    websocket_url: str = Field(
        description="the browser's CDP WebSocket through the API (ws:// or wss://); send the "
        "tenant's token as 'Authorization: Bearer', unless the URL is signed"
    )
    http_url: str = Field(description="the DevTools HTTP side through the port route (/json/...)")
    port: int = Field(description="the DevTools port on the sandbox's loopback")
    browser: str = Field(description="the browser's product and version (Chrome/...)")
    protocol_version: str = Field(description="the DevTools Protocol version")
    signed: bool = Field(False, description="websocket_url is a signed preview URL (no token)")
    expires_at: float | None = Field(None, description="when a signed URL stops working")
