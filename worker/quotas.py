"""Quotas -> a runtime-neutral ``SandboxSpec``, and the labels of a sandbox.

The half of a sandbox's limits that holds on every runtime; each runtime turns
the spec into its own terms (Docker: ``worker.runtimes.docker.container_kwargs``,
which says what every container gets and why). Here:

- The agent runs as root (PID 1, ``AGENT_COMMAND``) with only the capabilities
  of ``worker.runtimes.spec.AGENT_CAPS``, which every runtime gives it.
- ``SANDGRID_PIDS_MAX`` and ``SANDGRID_MEMORY_MAX`` in the agent's
  environment: the agent holds those limits itself where the host's cgroup
  cannot (gVisor: see ``worker.runtimes.docker_runsc`` and
  ``worker/agent/memory.py``), the host's limits (``HostLimits``) then carrying
  the runtime's headroom.
- The agent zipapp mounted read-only at ``AGENT_MOUNT``; with no network, an
  ``/etc/hosts`` of loopback names for the runtime to mount
  (``worker.runtimes.hosts``); the egress directory
  (``egress_dir``: the Unix socket of the node's egress proxy) read-only at
  ``/run/sandgrid-egress``, with the proxy variables and
  ``SANDGRID_EGRESS_PORT`` for the agent's loopback relay (``worker.egress``;
  the sandbox still has no network).

Labels. Docker labels are immutable, and a warm container exists before the
session it will serve is known. We label at create time with
``sandgrid.session`` and ``sandgrid.tenant`` *empty* for pool containers (or
filled when a container is created for a known session), and keep ownership in
the worker's pool and session table. The reaper treats a managed container of
its node that is not in those tables as an orphan; ``sandgrid.incarnation``
identifies the worker process that made it, so a restarted worker recognises
everything of its previous life as orphaned at once.
"""

from __future__ import annotations

from pathlib import Path

from sandgrid.models import Quotas
from worker.agent_client.bundle import AGENT_MOUNT
from worker.agent_client.bundle import agent_path as bundled_agent
from worker.egress.env import MOUNT as EGRESS_MOUNT
from worker.egress.env import proxy_env
from worker.runtimes.hosts import hosts_file
from worker.runtimes.spec import HostLimits, Mount, SandboxSpec

__all__ = [
    "AGENT_COMMAND",
    "LABEL_INCARNATION",
    "LABEL_MANAGED",
    "LABEL_SESSION",
    "LABEL_TENANT",
    "LABEL_TYPE",
    "LABEL_WORKER",
    "sandbox_labels",
    "sandbox_spec",
]

AGENT_COMMAND = ("python3", "-I", "-S", AGENT_MOUNT)
"""The agent is stdlib-only: ``-S`` skips ``site`` (~15 ms of its start under gVisor)."""

LABEL_MANAGED = "sandgrid.managed"
LABEL_WORKER = "sandgrid.worker"
LABEL_SESSION = "sandgrid.session"
LABEL_TENANT = "sandgrid.tenant"
LABEL_TYPE = "sandgrid.type"
LABEL_INCARNATION = "sandgrid.incarnation"

_MIB = 1 << 20


def sandbox_labels(
    *,
    node: str,
    sandbox_type: str,
    incarnation: str,
    session_id: str | None = None,
    tenant: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The labels of a sandbox container; ``extra`` cannot override ours."""
    ours = {
        LABEL_MANAGED: "1",
        LABEL_WORKER: node,
        LABEL_SESSION: session_id or "",
        LABEL_TENANT: tenant or "",
        LABEL_TYPE: sandbox_type,
        LABEL_INCARNATION: incarnation,
    }
    return {**(extra or {}), **ours}


def sandbox_spec(
    quotas: Quotas,
    *,
    image: str,
    name: str,
    labels: dict[str, str],
    runtime: str,
    network: str | None = None,
    host: HostLimits | None = None,
    agent_path: Path | None = None,
    egress_dir: Path | None = None,
    egress_port: int = 3128,
) -> SandboxSpec:
    """The spec of one sandbox, for any runtime.

    Args:
        quotas: the sandbox's limits (already validated).
        image: the sandbox image.
        name: the sandbox's name.
        labels: from ``sandbox_labels``.
        runtime: the runtime's name (``worker.runtimes.RUNTIMES``).
        network: the network to join; ``None`` means no network at all.
            The caller decides (quotas.network and the type's permission).
        host: the host's limits when they must differ from the quotas
            (``Runtime.host_limits``: gVisor's sentry counts there too).
        agent_path: the agent zipapp as the engine's host sees it (default:
            ``worker.agent_client.bundle.agent_path()``).
        egress_dir: the sandbox's egress directory on the host (None: no egress relay).
        egress_port: the loopback port of the sandbox's proxy.
    """
    environment = {
        "SANDGRID_PIDS_MAX": str(quotas.pids),
        "SANDGRID_MEMORY_MAX": str(quotas.memory_mb * _MIB),
    }
    agent = agent_path or bundled_agent()
    mounts = [Mount(AGENT_MOUNT, agent)]
    if egress_dir is not None:
        mounts.append(Mount(EGRESS_MOUNT, egress_dir))
        environment.update(proxy_env(egress_port), SANDGRID_EGRESS_PORT=str(egress_port))
    return SandboxSpec(
        name=name,
        image=image,
        runtime=runtime,
        command=AGENT_COMMAND,
        quotas=quotas,
        labels=labels,
        environment=environment,
        mounts=tuple(mounts),
        network=network,
        host=host or HostLimits(pids=quotas.pids, memory_mb=quotas.memory_mb),
        hosts=hosts_file(agent.parent) if network is None else None,
    )
