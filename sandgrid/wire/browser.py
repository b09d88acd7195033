"""The ``browser`` sandbox type's constants, in one place (issue 21.3, docs/browser.md).

The catalog entry (``sandgrid.wire.catalog``), the API's CDP route and browser
tools, and the tests all read the type from here, so that moving the type's
definition (to ``deploy/types.toml``) changes one module.
"""

from __future__ import annotations

__all__ = [
    "BROWSER_IMAGE",
    "BROWSER_TYPE",
    "CDP_PORT",
    "HEAP_ENV",
    "LAUNCHER",
    "is_browser_type",
]

#: The type's name, as clients ask for it.
BROWSER_TYPE = "browser"
#: Its image (images/sandbox-browser): Debian's Chromium and python3 for the agent.
BROWSER_IMAGE = "sandgrid/sandbox-browser:latest"
#: Where Chromium serves the DevTools Protocol, on the sandbox's own loopback.
CDP_PORT = 9222
#: The image's supervisor that starts Chromium and restarts it when it dies.
LAUNCHER = "/usr/local/bin/sandgrid-browser"
#: The launcher's environment variable capping each page's V8 heap (MiB).
HEAP_ENV = "SANDGRID_BROWSER_HEAP_MB"

_BROWSER_TYPES = frozenset({BROWSER_TYPE})


def is_browser_type(name: str) -> bool:
    """Whether sessions of type ``name`` have a browser (the CDP route and tools serve them)."""
    return name in _BROWSER_TYPES
