"""Quotas -> the arguments of Docker's ``create_container``, hardened by default.

What every sandbox gets, and why:

- The agent (PID 1) runs as root with only ``SETUID``, ``SETGID`` (to start
  user commands and file operations as uid/gid 1000 with no supplementary
  groups) and ``KILL`` (to signal the user's processes at a deadline). No
  ``CHOWN``, ``DAC_OVERRIDE``, ``FOWNER``: the agent cannot even read the
  user's private files, it forks and drops to uid 1000 for file operations.
  User code runs as uid 1000 with an empty capability set; ``no-new-privileges``
  makes setuid binaries useless.
- A read-only root filesystem; writable tmpfs only at ``/workspace``,
  ``/home/sandbox`` (owned by uid 1000) and ``/tmp``, each with its own size,
  all ``nosuid,nodev``. tmpfs pages are charged to the container's memory
  cgroup, so the memory limit must cover what the user writes there too: a
  full 256 MiB workspace uses 256 MiB of the sandbox's memory.
- ``network_mode="none"`` (only a loopback interface) unless the quotas ask for
  the network *and* the sandbox type allows it.
- ``pids_limit``, ``mem_limit`` with ``memswap_limit`` equal (no swap),
  ``SANDGRID_PIDS_MAX`` and ``SANDGRID_MEMORY_MAX`` for the agent, which holds
  those limits itself where the host's cgroup cannot (gVisor: see
  ``worker.backends.gvisor`` and ``worker/agent/memory.py``),
  ``nano_cpus`` (a CFS quota: ``cpus=0.5`` is half a core), ulimits ``nofile``,
  ``fsize`` and ``core=0``.
- The agent zipapp bind-mounted read-only; stdin kept open for the channel and
  closed when the worker detaches (``stdin_once``), so a sandbox whose worker
  died exits by itself, and ``auto_remove`` then deletes it.
- The egress directory (``egress_dir``: the Unix socket of the node's egress
  proxy) bind-mounted read-only at ``/run/sandgrid-egress``, with the proxy
  variables and ``SANDGRID_EGRESS_PORT`` for the agent's loopback relay
  (``worker.egress``; the network mode stays ``none``).
- No log driver: the channel carries file contents and outputs, which must not
  land in ``/var/lib/docker`` (the agent's stderr is logged by the worker).

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
from typing import Any

from docker.types import LogConfig, Mount, Ulimit

from sandgrid.models import Quotas
from worker.agent_bundle import AGENT_MOUNT
from worker.agent_bundle import agent_path as bundled_agent
from worker.egress.env import MOUNT as EGRESS_MOUNT
from worker.egress.env import proxy_env

__all__ = [
    "AGENT_CAPS",
    "AGENT_COMMAND",
    "LABEL_INCARNATION",
    "LABEL_MANAGED",
    "LABEL_SESSION",
    "LABEL_TENANT",
    "LABEL_TYPE",
    "LABEL_WORKER",
    "SANDBOX_GID",
    "SANDBOX_UID",
    "container_kwargs",
    "sandbox_labels",
]

SANDBOX_UID = 1000
SANDBOX_GID = 1000
AGENT_CAPS = ("SETUID", "SETGID", "KILL")
AGENT_COMMAND = ("python3", "-I", AGENT_MOUNT)

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


def _tmpfs(size_mb: int, *, user_owned: bool, sticky: bool = False) -> str:
    opts = ["rw", "exec", "nosuid", "nodev", f"size={size_mb}m"]
    if user_owned:
        opts += [f"uid={SANDBOX_UID}", f"gid={SANDBOX_GID}", "mode=0755"]
    elif sticky:
        opts.append("mode=1777")
    return ",".join(opts)


def container_kwargs(
    quotas: Quotas,
    *,
    image: str,
    name: str,
    labels: dict[str, str],
    runtime: str,
    network: str | None = None,
    host_pids: int | None = None,
    host_memory_mb: int | None = None,
    agent_path: Path | None = None,
    egress_dir: Path | None = None,
    egress_port: int = 3128,
) -> dict[str, Any]:
    """Keyword arguments for the low-level ``APIClient.create_container`` of one sandbox.

    ``host_config`` holds the keyword arguments of ``APIClient.create_host_config``
    (the high-level ``containers.create`` cannot set ``StdinOnce``).

    Args:
        quotas: the sandbox's limits (already validated).
        image: the sandbox image.
        name: the container name.
        labels: from ``sandbox_labels``.
        runtime: the Docker runtime (``runc``, ``runsc``).
        network: the Docker network to join; ``None`` means no network at all.
            The caller decides (quotas.network and the type's permission).
        host_pids: the host cgroup's pids limit when it must differ from
            ``quotas.pids`` (gVisor: the sentry's threads count there too; the
            agent then applies ``quotas.pids`` inside, see ``SANDGRID_PIDS_MAX``).
        host_memory_mb: the host memory limit when it must differ from
            ``quotas.memory_mb`` (gVisor: the sentry's own memory counts there;
            without headroom the host OOM killer picks the sentry, which takes
            the whole sandbox down instead of the user's biggest process).
        agent_path: the agent zipapp as the engine's host sees it (default:
            ``worker.agent_bundle.agent_path()``).
        egress_dir: the sandbox's egress directory on the host (None: no egress relay).
        egress_port: the loopback port of the sandbox's proxy.
    """
    agent = agent_path or bundled_agent()
    host_config = _host_config(quotas, runtime, network, host_pids, host_memory_mb, agent)
    environment = {
        "SANDGRID_PIDS_MAX": str(quotas.pids),
        "SANDGRID_MEMORY_MAX": str(quotas.memory_mb * _MIB),
    }
    if egress_dir is not None:
        host_config["mounts"].append(
            Mount(EGRESS_MOUNT, str(egress_dir), type="bind", read_only=True)
        )
        environment.update(proxy_env(egress_port), SANDGRID_EGRESS_PORT=str(egress_port))
    return {
        "image": image,
        "name": name,
        "command": list(AGENT_COMMAND),
        "user": "0:0",
        "working_dir": "/",
        "hostname": "sandbox",
        "environment": environment,
        "labels": labels,
        "stdin_open": True,
        "detach": False,  # with stdin_open: AttachStdin and StdinOnce (no other way in the SDK)
        "tty": False,
        "host_config": host_config,
    }


def _host_config(
    quotas: Quotas,
    runtime: str,
    network: str | None,
    host_pids: int | None,
    host_memory_mb: int | None,
    agent_path: Path,
) -> dict[str, Any]:
    mem = f"{host_memory_mb or quotas.memory_mb}m"
    return {
        "runtime": runtime,
        "auto_remove": True,
        "network_mode": network or "none",
        "cap_drop": ["ALL"],
        "cap_add": list(AGENT_CAPS),
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            "/workspace": _tmpfs(quotas.workspace_mb, user_owned=True),
            "/home/sandbox": _tmpfs(quotas.home_mb, user_owned=True),
            "/tmp": _tmpfs(quotas.tmp_mb, user_owned=False, sticky=True),
        },
        "pids_limit": host_pids or quotas.pids,
        "mem_limit": mem,
        "memswap_limit": mem,
        "nano_cpus": int(quotas.cpus * 1e9),
        "ulimits": [
            Ulimit(name="nofile", soft=quotas.nofile, hard=quotas.nofile),
            Ulimit(name="fsize", soft=quotas.fsize_mb * _MIB, hard=quotas.fsize_mb * _MIB),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "mounts": [Mount(AGENT_MOUNT, str(agent_path), type="bind", read_only=True)],
        "log_config": LogConfig(type="none"),
    }
