"""A whole grid as local processes: ``sandgrid serve`` and worker nodes.

Benchmarks and integration tests start their own grid on their own port and
Redis database, so that they never disturb the grid ``make up`` started, and
stop every process they started (by process group).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["SANDGRID", "LocalGrid"]

SANDGRID = [sys.executable, "-m", "sandgrid.cli"]


class LocalGrid:
    """Start, watch and stop a local grid.

    Args:
        workdir: logs, tenants file and local snapshots go here.
        port: the API's port on 127.0.0.1.
        redis_url: the Redis database to use (it is not flushed here).
        tenants: tenant name -> token.
        env: extra ``SANDGRID_*`` settings for every process.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        port: int,
        redis_url: str,
        tenants: dict[str, str],
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.api_url = f"http://127.0.0.1:{port}"
        self.port = port
        workdir.mkdir(parents=True, exist_ok=True)
        tenants_file = workdir / "tenants.json"
        rows = [{"name": n, "token": t} for n, t in tenants.items()]
        tenants_file.write_text(json.dumps({"tenants": rows}))
        self.env = {
            **os.environ,
            "SANDGRID_REDIS_URL": redis_url,
            "SANDGRID_API_URL": self.api_url,
            "SANDGRID_TENANTS_FILE": str(tenants_file),
            "SANDGRID_WORKER__LOCAL_SNAPSHOT_DIR": str(workdir / "snapshots"),
            **(env or {}),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``sandgrid ARGS`` as ``name``; ``env`` adds to the grid's settings."""
        with (self.workdir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [*SANDGRID, *args],
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def start(self, nodes: list[str], *, types: str = "python", concurrency: int = 4) -> None:
        """Start the API and one worker per node; wait until all are seen."""
        self.spawn("api", "serve", "--host", "127.0.0.1", "--port", str(self.port))
        for node in nodes:
            self.start_worker(node, types=types, concurrency=concurrency)
        self.wait(lambda: self.workers_seen() >= set(nodes), "the workers in /v1/health")

    def start_worker(
        self,
        node: str,
        *,
        types: str = "python",
        concurrency: int = 4,
        env: dict[str, str] | None = None,
    ) -> None:
        """Start a worker node; ``env`` is its own (``DOCKER_HOST`` of its engine, say)."""
        self.spawn(
            node,
            "worker",
            *("--types", types, "--concurrency", str(concurrency), "--node", node),
            env=env,
        )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, sig)
        proc.wait(60)

    def stop(self) -> None:
        """SIGTERM every process (workers drain), then SIGKILL what is left."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.procs.clear()

    def workers_seen(self) -> set[str]:
        return set(httpx.get(f"{self.api_url}/v1/health", timeout=2).json()["workers"])

    def wait(self, cond: Any, what: str, timeout: float = 90) -> None:
        """Poll ``cond`` until true; fail early, with the logs, if a process died."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if cond():
                    return
            except httpx.HTTPError:
                pass
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited waiting for {what}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.2)

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}"
            for f in sorted(self.workdir.glob("*.log"))
        )
