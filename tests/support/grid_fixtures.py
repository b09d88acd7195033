"""A whole grid for integration tests of batches: API, two workers, Flower.

Built on ``sandgrid.localgrid.LocalGrid`` (the processes and their logs live
under the test's temporary directory; every process started is stopped by its
process group at teardown). Import the fixture into a test module::

    from tests.support.grid_fixtures import BatchGrid, batch_grid  # noqa: F401

It uses its own API and Flower ports and its own Redis database (flushed
before and after), so it never disturbs the grid ``make up`` started, nor the
other integration modules' grids.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgrid.localgrid import LocalGrid
from tests.support.redis_db import fresh_db

API_PORT = int(os.environ.get("SANDGRID_TEST_BATCH_API_PORT", "8712"))
FLOWER_PORT = int(os.environ.get("SANDGRID_TEST_FLOWER_PORT", "5566"))
REDIS_URL = os.environ.get("SANDGRID_TEST_BATCH_REDIS_URL", "redis://127.0.0.1:6379/14")
NODES = ("batch-w1", "batch-w2")
TYPES = ("python", "bfcl", "appworld")
WARM_PER_TYPE = 1
TOKEN = "tok-batch-" + "d" * 24
FLOWER_USER = "admin"
FLOWER_PASSWORD = "flower-test-pw"
SANDGRID = [sys.executable, "-m", "sandgrid.cli"]


@dataclass
class BatchGrid:
    """The running grid: its processes, its API, its Flower, and how to run the CLI."""

    grid: LocalGrid
    workdir: Path
    flower_url: str

    @property
    def api_url(self) -> str:
        return self.grid.api_url

    @property
    def env(self) -> dict[str, str]:
        return {**self.grid.env, "SANDGRID_TOKEN": TOKEN}

    def cli(self, *args: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """``sandgrid ARGS`` as a process of its own group (so it can be killed whole)."""
        return subprocess.Popen(
            [*SANDGRID, *args],
            env=self.env,
            cwd=cwd or self.workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def flower(self, path: str, *, auth: bool = True) -> httpx.Response:
        creds = (FLOWER_USER, FLOWER_PASSWORD) if auth else None
        return httpx.get(f"{self.flower_url}{path}", auth=creds, timeout=10)


def start_flower(grid: LocalGrid, port: int = FLOWER_PORT) -> None:
    """Flower as the platform starts it (deploy/local/grid.sh): basic auth from a
    password file, no state file."""
    with (grid.workdir / "flower.log").open("ab") as log:
        proc = _popen_flower(grid, log, port)
    grid.procs["flower"] = proc
    url = f"http://127.0.0.1:{port}/healthcheck"
    grid.wait(lambda: httpx.get(url, timeout=2).status_code == 200, "Flower")


def _password_file(grid: LocalGrid) -> Path:
    """Flower's password in a 0600 file, as grid.sh keeps it (never on a command line)."""
    path = grid.workdir / "flower-password"
    path.touch(mode=0o600)
    path.write_text(FLOWER_PASSWORD + "\n")
    return path


def _popen_flower(grid: LocalGrid, log: Any, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.flower",
            "-A",
            "sandgrid.wire.celery_app:app",
            "flower",
            "--address=127.0.0.1",
            f"--port={port}",
            "--persistent=False",
        ],
        env={**grid.env, "SANDGRID_FLOWER_PASSWORD_FILE": str(_password_file(grid))},
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.fixture(scope="module")
def batch_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BatchGrid]:
    """API + two workers (python, bfcl, appworld; 2 threads each) + Flower, for one module."""
    workdir = tmp_path_factory.mktemp("batchgrid")
    r = fresh_db(REDIS_URL)
    grid = LocalGrid(
        workdir / "grid",
        port=API_PORT,
        redis_url=REDIS_URL,
        tenants={"batch": TOKEN},
        env={
            "SANDGRID_WORKER__POOL_SIZE": str(WARM_PER_TYPE),
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_HEARTBEAT_S": "0.5",
            "SANDGRID_LEASE_TTL_S": "4",
        },
    )
    try:
        start_flower(grid)  # first: it sees every task event from the start
        grid.start(list(NODES), types=",".join(TYPES), concurrency=2)
        yield BatchGrid(grid, workdir, f"http://127.0.0.1:{FLOWER_PORT}")
    finally:
        grid.stop()
        r.flushdb()
        r.close()


@contextmanager
def own_grid(
    work: Path,
    *,
    port: int,
    redis_url: str,
    tenants: dict[str, str],
    nodes: list[str],
    types: str,
    env: dict[str, str] | None = None,
) -> Iterator[LocalGrid]:
    """A grid of a test module's own on a flushed Redis database (skipped when Redis is
    missing), with local snapshots and 1 warm sandbox a type; stopped and flushed after."""
    r = fresh_db(redis_url)
    base = {"SANDGRID_WORKER__POOL_SIZE": "1", "SANDGRID_WORKER__SNAPSHOT_STORE": "local"}
    grid = LocalGrid(
        work / "grid", port=port, redis_url=redis_url, tenants=tenants, env={**base, **(env or {})}
    )
    try:
        grid.start(nodes, types=types, concurrency=4)
        yield grid
    finally:
        grid.stop()
        r.flushdb()
        r.close()


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> str:
    """Signal a process started by ``BatchGrid.cli`` and its whole group; reap it.

    Returns:
        What it wrote on stderr.
    """
    os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=60)
    return err.decode(errors="replace")
