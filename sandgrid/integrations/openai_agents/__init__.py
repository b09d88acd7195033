"""sandgrid as a sandbox provider of the OpenAI Agents SDK.

Install with ``pip install 'sandgrid[openai-agents]'``::

    from agents.run import RunConfig
    from agents.sandbox import SandboxRunConfig
    from sandgrid.integrations.openai_agents import SandgridSandboxClient

    run_config = RunConfig(sandbox=SandboxRunConfig(client=SandgridSandboxClient()))

See docs/integrations.md for what is supported.
"""

from __future__ import annotations

try:
    import agents.sandbox  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sandgrid.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'sandgrid[openai-agents]'"
    ) from exc

from sandgrid.integrations.openai_agents.client import (
    SandgridSandboxClient,
    SandgridSandboxClientOptions,
)
from sandgrid.integrations.openai_agents.session import (
    SandgridSandboxSession,
    SandgridSandboxSessionState,
)

__all__ = [
    "SandgridSandboxClient",
    "SandgridSandboxClientOptions",
    "SandgridSandboxSession",
    "SandgridSandboxSessionState",
]
