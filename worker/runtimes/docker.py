"""Docker: what the runtimes on the Docker Engine share (runc, gVisor's runsc).

Sandboxes are containers created through the Engine API (the ``docker`` SDK,
imported here only) from ``container_kwargs``; the agent channel is the
container's attach stream (``docker_attach``); nothing uses ``docker exec``.
Configuration: the Docker client comes from the environment (``DOCKER_HOST``
etc., ``docker.from_env``) unless one is passed in; ``oci_runtime`` names the
OCI runtime registered with the daemon (``docker_runc``, ``docker_runsc``).

What every container gets from the spec, and why:

- The agent (PID 1) runs as root with only ``AGENT_CAPS`` (``spec``: to
  start user commands as uid/gid 1000 and signal them at a deadline); user
  code runs as uid 1000 with an empty capability set; ``no-new-privileges``
  makes setuid binaries useless.
- A read-only root filesystem; writable tmpfs only at ``/workspace``,
  ``/home/sandbox`` (owned by uid 1000) and ``/tmp``, each with its own size,
  all ``nosuid,nodev``. tmpfs pages are charged to the container's memory
  cgroup, so the memory limit must cover what the user writes there too.
- ``network_mode="none"`` (only a loopback interface) unless the spec names a
  network. With none, Docker's networking is disabled altogether
  (``network_disabled``): the engine runs no network hook at the container's
  start (~110-130 ms of it) and mounts no ``/etc/hosts`` or ``/etc/resolv.conf``
  of its own, and the spec's ``/etc/hosts`` (``worker.runtimes.hosts``) is
  mounted instead. The engine's setup is kept for ``spec.engine_network`` (a
  memory image saved before restores only into that layout) and when the spec
  has no hosts file (the worker could not write it). The egress relay is a
  bind-mounted Unix socket, not a network.
- ``pids_limit``, ``mem_limit`` with ``memswap_limit`` equal (no swap), both
  the spec's host limits; ``nano_cpus`` (a CFS quota: ``cpus=0.5`` is half a
  core), ulimits ``nofile``, ``fsize`` and ``core=0``.
- The spec's mounts bind-mounted read-only (the agent zipapp, the egress dir);
  stdin kept open for the channel and closed when the worker detaches
  (``stdin_once``), so a sandbox whose worker died exits by itself, and
  ``auto_remove`` then deletes it.
- No log driver: the channel carries file contents and outputs, which must not
  land in ``/var/lib/docker`` (the agent's stderr is logged by the worker).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, ClassVar

from sandgrid.errors import SandboxError
from worker.runtimes.base import ByteStream, Runtime
from worker.runtimes.docker_attach import AttachStream, attach_params
from worker.runtimes.hostkill import kill_top_process
from worker.runtimes.hosts import HOSTS_MOUNT
from worker.runtimes.spec import AGENT_CAPS, SANDBOX_GID, SANDBOX_UID, SandboxSpec
from worker.runtimes.spec import Mount as SpecMount

try:
    import docker
    from docker.errors import APIError, NotFound
    from docker.types import LogConfig, Mount, Ulimit
except ImportError as exc:  # pragma: no cover - the worker extra depends on docker
    raise ImportError(
        "the Docker runtimes need the 'docker' package: pip install 'docker>=7.1'"
    ) from exc

__all__ = ["REMOVE_WAIT_S", "DockerRuntime", "container_kwargs"]

REMOVE_WAIT_S = 10.0
_MIB = 1 << 20


def container_kwargs(spec: SandboxSpec, *, oci_runtime: str) -> dict[str, Any]:
    """Keyword arguments for the low-level ``APIClient.create_container`` of ``spec``.

    ``host_config`` holds the keyword arguments of ``APIClient.create_host_config``
    (the high-level ``containers.create`` cannot set ``StdinOnce``).
    ``oci_runtime`` is the daemon's runtime (``runc``, ``runsc``).
    """
    return {
        "image": spec.image,
        "name": spec.name,
        "command": list(spec.command),
        "user": "0:0",
        "working_dir": "/",
        "hostname": "sandbox",
        "environment": dict(spec.environment),
        "labels": dict(spec.labels),
        "network_disabled": _own_hosts(spec) is not None,
        "stdin_open": True,
        "detach": False,  # with stdin_open: AttachStdin and StdinOnce (no other way in the SDK)
        "tty": False,
        "host_config": _host_config(spec, oci_runtime),
    }


def _tmpfs(size_mb: int, *, user_owned: bool, sticky: bool = False) -> str:
    opts = ["rw", "exec", "nosuid", "nodev", f"size={size_mb}m"]
    if user_owned:
        opts += [f"uid={SANDBOX_UID}", f"gid={SANDBOX_GID}", "mode=0755"]
    elif sticky:
        opts.append("mode=1777")
    return ",".join(opts)


def _own_hosts(spec: SandboxSpec) -> Path | None:
    """The ``/etc/hosts`` to mount when the engine's networking is off: no
    network, a hosts file, and not the engine's layout; None keeps it on."""
    if spec.network is None and not spec.engine_network:
        return spec.hosts
    return None


def _mounts(spec: SandboxSpec) -> tuple[SpecMount, ...]:
    """The spec's mounts, and its ``/etc/hosts`` where the engine mounts none."""
    hosts = _own_hosts(spec)
    return spec.mounts if hosts is None else (*spec.mounts, SpecMount(HOSTS_MOUNT, hosts))


def _host_config(spec: SandboxSpec, oci_runtime: str) -> dict[str, Any]:
    quotas = spec.quotas
    mem = f"{spec.host.memory_mb}m"
    return {
        "runtime": oci_runtime,
        "auto_remove": True,
        "network_mode": spec.network or "none",
        "cap_drop": ["ALL"],
        "cap_add": list(AGENT_CAPS),
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        "tmpfs": {
            "/workspace": _tmpfs(quotas.workspace_mb, user_owned=True),
            "/home/sandbox": _tmpfs(quotas.home_mb, user_owned=True),
            "/tmp": _tmpfs(quotas.tmp_mb, user_owned=False, sticky=True),
        },
        "pids_limit": spec.host.pids,
        "mem_limit": mem,
        "memswap_limit": mem,
        "nano_cpus": int(quotas.cpus * 1e9),
        "ulimits": [
            Ulimit(name="nofile", soft=quotas.nofile, hard=quotas.nofile),
            Ulimit(name="fsize", soft=quotas.fsize_mb * _MIB, hard=quotas.fsize_mb * _MIB),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "mounts": [
            Mount(m.target, str(m.source), type="bind", read_only=m.read_only)
            for m in _mounts(spec)
        ],
        "log_config": LogConfig(type="none"),
    }


class DockerRuntime(Runtime):
    """Sandboxes as Docker containers under the OCI runtime ``oci_runtime``.

    Args:
        client: a ``docker.DockerClient``; ``docker.from_env()`` if omitted.
    """

    oci_runtime: ClassVar[str]

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self.client = client or docker.from_env(timeout=60)

    def has_image(self, image: str) -> bool:
        """Whether the engine has ``image`` (by tag or id)."""
        try:
            self.client.images.get(image)
        except NotFound:
            return False
        return True

    def available(self) -> bool:
        """Whether the engine has the OCI runtime registered (runsc must be)."""
        runtimes = self.client.info().get("Runtimes") or {}
        return self.oci_runtime in runtimes

    def create(self, spec: SandboxSpec) -> str:
        args = container_kwargs(spec, oci_runtime=self.oci_runtime)
        host_config = self.client.api.create_host_config(**args.pop("host_config"))
        reply = self.client.api.create_container(**args, host_config=host_config)
        return str(reply["Id"])

    def attach(self, sandbox_id: str, name: str) -> ByteStream:
        raw = self.client.api.attach_socket(sandbox_id, params=attach_params())
        sock = getattr(raw, "_sock", raw)  # SocketIO on unix sockets wraps the socket
        if not isinstance(sock, socket.socket):
            raise TypeError(f"attach gave a {type(sock).__name__}, not a socket")
        return AttachStream(sock, name)

    def start(self, sandbox_id: str) -> None:
        self.client.api.start(sandbox_id)

    def remove(self, sandbox_id: str) -> None:
        try:
            self.client.api.remove_container(sandbox_id, force=True, v=True)
        except NotFound:
            return
        except APIError as exc:
            # auto_remove got there first (the container exited): wait until it is gone
            if exc.status_code != 409:
                raise
        self._wait_gone(sandbox_id)

    def kill(self, sandbox_id: str) -> bool:
        try:
            pid = self.client.api.inspect_container(sandbox_id)["State"]["Pid"]
        except NotFound:
            return True
        return kill_top_process(pid, sandbox_id)  # else rm -f kills, through the runtime

    def _wait_gone(self, container_id: str) -> None:
        deadline = time.monotonic() + REMOVE_WAIT_S
        while time.monotonic() < deadline:
            try:
                self.client.api.inspect_container(container_id)
            except NotFound:
                return
            time.sleep(0.05)
        raise SandboxError(
            f"container {container_id[:12]} still exists {REMOVE_WAIT_S:.0f} s after removal",
            operation="destroy",
            context={"container": container_id},
        )

    def inspect(self, sandbox_id: str) -> dict[str, Any]:
        try:
            attrs = self.client.api.inspect_container(sandbox_id)
        except NotFound:
            return {"id": sandbox_id, "status": "gone", "running": False}
        return _summary(attrs)

    def list_labelled(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        rows = self.client.api.containers(all=True, filters=filters)
        return [
            {
                "id": row["Id"],
                "name": (row.get("Names") or ["/"])[0].lstrip("/"),
                "status": row.get("State", ""),
                "running": row.get("State") == "running",
                "labels": row.get("Labels") or {},
                "created": float(row.get("Created", 0)),
            }
            for row in rows
        ]


def _summary(attrs: dict[str, Any]) -> dict[str, Any]:
    state = attrs.get("State") or {}
    host = attrs.get("HostConfig") or {}
    return {
        "id": attrs["Id"],
        "name": str(attrs.get("Name", "")).lstrip("/"),
        "status": state.get("Status", ""),
        "running": bool(state.get("Running")),
        "oom_killed": bool(state.get("OOMKilled")),
        "exit_code": state.get("ExitCode"),
        "started_at": state.get("StartedAt", ""),
        "labels": (attrs.get("Config") or {}).get("Labels") or {},
        "runtime": host.get("Runtime", ""),
        "pid": state.get("Pid"),
    }
