"""The in-sandbox agent: one stdlib-only file that runs as PID 1 of every sandbox.

The worker never imports the agent; it bind-mounts the file read-only into each
container. ``AGENT_PATH`` is where that file is on the worker's disk and
``AGENT_MOUNT`` where the image expects it. When the worker itself runs in a
container (compose, Kubernetes), the Docker engine resolves the bind mount on
the host: ``SANDGRID_WORKER__AGENT_PATH`` then names the file's path there.
"""

from __future__ import annotations

from pathlib import Path

from sandgrid.wire.settings import get_settings

__all__ = ["AGENT_MOUNT", "AGENT_PATH"]

AGENT_PATH = get_settings().worker.agent_path or Path(__file__).with_name("sandgrid_agent.py")
AGENT_MOUNT = "/opt/sandgrid/agent.py"
