"""The browser sandbox type on the API side (issue 21.3-21.4, docs/browser.md).

``cdp`` speaks the Chrome DevTools Protocol over a port tunnel, ``launch``
starts the sandbox's Chromium on first use and finds its endpoint, ``tools``
are the browser tools (navigate, screenshot, click, type, snapshot) that the
MCP server and AgentScope's remote API serve.
"""

from __future__ import annotations

__all__: list[str] = []
