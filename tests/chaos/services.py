"""Servers of the chaos suite's own: a Redis, a MinIO and a Docker engine.

The Redis, MinIO and Docker engine that ``make up`` started are shared with
every other test running on the machine, so the chaos suite never stops them.
It starts its own, which it may stop, kill and restart at will:

- ``PrivateRedis``: ``redis-server`` on a free port with its own directory and
  AOF persistence (``appendonly yes``, ``appendfsync everysec``), as production
  runs it (issue 11, item 1).
- ``PrivateMinio`` (of the snapshot grid tests, ``tests/integration``): ``deploy/local/minio.sh``
  with its own port and ``SANDGRID_STATE_DIR``.
- ``PrivateDockerd``: a second ``dockerd`` (``deploy/local/docker2.sh``) with its
  own data root, exec root, pid file and Unix socket, no bridge, no iptables,
  the runc runtime; the sandbox images are copied into it from the main engine
  (``docker save | docker load``) and kept in its data root between runs.
  Workers use it through ``DOCKER_HOST``.

Each is stopped by its own pid, never by a process name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import redis

from tests.integration.test_snapshots_grid import wait_for

__all__ = ["PrivateDockerd", "PrivateRedis", "free_port"]

_REPO = Path(__file__).resolve().parents[2]
_DOCKER2_SH = _REPO / "deploy" / "local" / "docker2.sh"
_DOCKER_CLI = "/usr/bin/docker"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A ``redis-server`` of our own, durable as production's (AOF, fsync every second).

    Args:
        workdir: its data directory (the AOF lives there and survives restarts).
    """

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def ping(self) -> bool:
        client: redis.Redis[bytes] = redis.Redis(port=self.port, socket_timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start(self) -> None:
        """Start it (reloading its AOF) and wait until it answers."""
        if self.proc is not None and self.proc.poll() is None:
            return
        args = ["--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir)]
        args += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
        with (self.dir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", *args, "--daemonize", "no"],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        wait_for(self.ping, f"redis on port {self.port}", 30)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """SIGTERM (a clean shutdown: the AOF is flushed) or SIGKILL (a crash)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class PrivateDockerd:
    """A second Docker engine, driven by ``deploy/local/docker2.sh``.

    Args:
        root: its state (data root, exec root, socket, pid file, log); a fixed
            directory keeps the loaded images from one run to the next.
        images: the images to copy in from the main engine when missing there
            or different.
    """

    def __init__(self, root: Path, images: tuple[str, ...]) -> None:
        self.root = root
        self.images = images
        self.host = f"unix://{root}/run/docker.sock"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SANDGRID_DOCKER2_DIR": str(self.root)}

    def _script(self, *args: str, timeout: float = 120) -> None:
        subprocess.run(
            [str(_DOCKER2_SH), *args],
            env=self.env,
            check=True,
            timeout=timeout,
            capture_output=True,
        )

    def start(self) -> None:
        """Start the engine (idempotent) and wait until it answers."""
        self._script("start")

    def stop(self) -> None:
        """Stop the engine by its pid file (its containers stop with it: no live-restore)."""
        self._script("stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.host, timeout=60)

    def load_images(self) -> None:
        """Copy each image from the main engine unless this engine has the same one."""
        for image in self.images:
            if self._image_id(image, None) == self._image_id(image, self.host):
                continue
            save = subprocess.Popen([_DOCKER_CLI, "save", image], stdout=subprocess.PIPE)
            subprocess.run(
                [_DOCKER_CLI, "load", "-q"],
                stdin=save.stdout,
                env={**os.environ, "DOCKER_HOST": self.host},
                check=True,
                timeout=300,
                capture_output=True,
            )
            assert save.wait(60) == 0, f"docker save {image} failed"

    @staticmethod
    def _image_id(image: str, host: str | None) -> str:
        env = dict(os.environ)
        env.pop("DOCKER_HOST", None)
        if host:
            env["DOCKER_HOST"] = host
        out = subprocess.run(
            [_DOCKER_CLI, "image", "inspect", "-f", "{{.Id}}", image],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip() if out.returncode == 0 else ""

    def remove_containers(self, label: str) -> int:
        """Remove every container carrying ``label``; how many there were."""
        client = self.client()
        try:
            found = client.containers.list(all=True, filters={"label": label})
            for c in found:
                with contextlib.suppress(Exception):
                    c.remove(force=True)
            return len(found)
        finally:
            client.close()
