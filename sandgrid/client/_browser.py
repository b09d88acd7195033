"""The request of the browser type (issue 21.3, docs/browser.md): where its CDP answers.

``cdp`` is one call (``GET /v1/sessions/{id}/cdp``), which starts the session's
Chromium on first use. Pure: no I/O.
"""

from __future__ import annotations

from sandgrid.client._call import Call, parse_as
from sandgrid.ops.browser import CdpEndpoint

__all__ = ["cdp"]


def cdp(
    session_id: str, *, signed: bool = False, expires_in: int | None = None
) -> Call[CdpEndpoint]:
    """The browser's CDP endpoint (``CdpEndpoint.websocket_url``, for
    ``playwright.chromium.connect_over_cdp(url, headers={"Authorization": ...})``);
    ``signed`` makes it a preview URL that needs no token, for ``expires_in`` seconds."""
    params: dict[str, str] = {"signed": "true"} if signed else {}
    if expires_in is not None:
        params["expires_in"] = str(expires_in)
    path = f"/v1/sessions/{session_id}/cdp"
    return Call("GET", path, parse_as(CdpEndpoint), params=params or None, timeout=120)
