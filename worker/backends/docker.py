"""Docker with runc: the default sandbox backend.

Supports every operation of ``SandboxBackend`` through the Docker Engine API
(the ``docker`` SDK, imported here only): containers are created hardened by
``worker.quotas.container_kwargs``, the agent channel is the container's
attach stream, and nothing uses ``docker exec``.

Configuration: the Docker client comes from the environment (``DOCKER_HOST``
etc., ``docker.from_env``) unless one is passed in; the runtime is the class
attribute ``runtime`` (``runc``), which a subclass overrides to run the same
containers under another OCI runtime registered with the daemon.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from sandgrid.errors import SandboxError
from worker.backends.base import SandboxBackend
from worker.backends.hostkill import kill_top_process

try:
    import docker
    from docker.errors import APIError, NotFound
except ImportError as exc:  # pragma: no cover - the worker depends on docker
    raise ImportError(
        "the Docker backends need the 'docker' package: pip install 'docker>=7.1'"
    ) from exc

__all__ = [
    "REMOVE_WAIT_S",
    "DockerBackend",
]

REMOVE_WAIT_S = 10.0


class DockerBackend(SandboxBackend):
    """Sandboxes as Docker containers under runc.

    Args:
        client: a ``docker.DockerClient``; ``docker.from_env()`` if omitted.
        **kwargs: see ``SandboxBackend``.
    """

    runtime = "runc"

    def __init__(self, client: docker.DockerClient | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client = client or docker.from_env(timeout=60)

    def _create(self, kwargs: dict[str, Any]) -> str:
        args = dict(kwargs)
        host_config = self.client.api.create_host_config(**args.pop("host_config"))
        reply = self.client.api.create_container(**args, host_config=host_config)
        return str(reply["Id"])

    def _attach(self, container_id: str) -> socket.socket:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        raw = self.client.api.attach_socket(container_id, params=params)
        sock = getattr(raw, "_sock", raw)  # SocketIO on unix sockets wraps the socket
        if not isinstance(sock, socket.socket):
            raise TypeError(f"attach gave a {type(sock).__name__}, not a socket")
        return sock

    def _start(self, container_id: str) -> None:
        self.client.api.start(container_id)

    def _remove(self, container_id: str) -> None:
        try:
            self.client.api.remove_container(container_id, force=True, v=True)
        except NotFound:
            return
        except APIError as exc:
            # auto_remove got there first (the container exited): wait until it is gone
            if exc.status_code != 409:
                raise
        self._wait_gone(container_id)

    def _kill(self, container_id: str) -> bool:
        try:
            pid = self.client.api.inspect_container(container_id)["State"]["Pid"]
        except NotFound:
            return True
        return kill_top_process(pid, container_id)  # else rm -f kills, through the runtime

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

    def _inspect(self, container_id: str) -> dict[str, Any]:
        try:
            attrs = self.client.api.inspect_container(container_id)
        except NotFound:
            return {"id": container_id, "status": "gone", "running": False}
        return _summary(attrs)

    def _list(self, labels: dict[str, str]) -> list[dict[str, Any]]:
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
