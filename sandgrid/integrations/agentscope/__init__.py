"""sandgrid as a workspace backend of AgentScope 2.0.

Install with ``pip install 'sandgrid[agentscope]'``::

    from sandgrid.client import AsyncClient
    from sandgrid.integrations.agentscope import SandgridWorkspace

    async with AsyncClient() as client, SandgridWorkspace(client=client) as ws:
        tools = await ws.list_tools()  # Bash, Read, Write, ... in a grid session

``SandgridBackend`` is the ``BackendBase`` alone, over a session you opened.
``sandgrid.integrations.agentscope.manager.SandgridWorkspaceManager`` hands out
workspaces to AgentScope's app; it needs the app's own dependencies
(``pip install 'agentscope[service]'``), so it is not imported here. See
docs/integrations.md for what maps to what.

The two classes are imported on first use, so that the framework-neutral
modules beside them (``calls``: the grid calls and their mapping; ``wrapper``:
the ``sh`` programs) import, and are tested, without AgentScope.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandgrid.integrations.agentscope.backend import SandgridBackend
    from sandgrid.integrations.agentscope.workspace import SandgridWorkspace

__all__ = ["SandgridBackend", "SandgridWorkspace"]

_MODULES = {"SandgridBackend": "backend", "SandgridWorkspace": "workspace"}


def __getattr__(name: str) -> Any:
    """``SandgridBackend`` and ``SandgridWorkspace``, imported when first asked for."""
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import agentscope.tool  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "sandgrid.integrations.agentscope needs AgentScope 2.0: "
            "pip install 'sandgrid[agentscope]'"
        ) from exc
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
