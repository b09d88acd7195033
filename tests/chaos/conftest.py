"""Fixtures of the chaos suite: its own services, its grid, and the fault injectors.

Nothing here touches the services that ``make up`` started, which other tests
share: the suite has its own Redis (AOF, as production), its own MinIO and its
own Docker engine (``services.py``), started once for the session and stopped
at its end. Each test gets a fresh grid (``sandgrid.localgrid``: the API and two
worker nodes, ``chaos-w1`` and ``chaos-w2``) on them, with short heartbeats, so
that a dead worker is noticed in 1.5 s. At the end of each test the grid is
stopped and every container of its nodes removed, whatever happened.

The fault injectors are fixtures returning one callable each:

- ``kill_worker(node)``: SIGKILL the worker's process group, and start it again
  under the same name at once, as ``deploy/local/grid.sh`` does in production;
- ``restart_redis()``, ``restart_minio()``, ``restart_dockerd()``: stop the
  service, keep it down for ``DOWN_S`` seconds, start it again.

Each returns the monotonic window in which the fault was in force. Each
scenario's table is printed to the terminal (also under ``-q``) and appended
to ``$SANDGRID_CHAOS_TABLES`` when that names a file.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from sandgrid.client import Client
from sandgrid.localgrid import LocalGrid
from tests.chaos.accounting import Accounting
from tests.chaos.services import PrivateDockerd, PrivateRedis, free_port
from tests.integration.test_snapshots_grid import ACCESS, MINIO_BIN_DIR, SECRET, PrivateMinio
from worker.quotas import LABEL_WORKER

NODES = ("chaos-w1", "chaos-w2")
TOKEN = "tok-chaos-" + "c" * 24
IMAGES = ("sandgrid/sandbox-python:latest",)
DOCKER2_DIR = Path(os.environ.get("SANDGRID_CHAOS_DOCKER2_DIR", "/var/lib/sandgrid/chaos-docker2"))
HEARTBEAT_S = 0.5
NODE_TTL_S = 3 * HEARTBEAT_S
"""When the grid takes a worker for dead (``worker.heartbeat.NODE_TTL_BEATS`` beats)."""
DOWN_S = 3.0
LEFT_GRACE_S = 15.0
GRID_ENV = {
    "SANDGRID_HEARTBEAT_S": str(HEARTBEAT_S),
    "SANDGRID_LEASE_TTL_S": "4",
    "SANDGRID_WORKER__POOL_SIZE": "1",
    "SANDGRID_WORKER__REAP_INTERVAL_S": "1",
    "SANDGRID_WORKER__SNAPSHOT_STORE": "minio",
    "SANDGRID_MINIO__ACCESS_KEY": ACCESS,
    "SANDGRID_MINIO__SECRET_KEY": SECRET,
}

Window = tuple[float, float]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"chaos services missing in CI: {reason}")
    pytest.skip(reason)


# ---- the services, once per session ------------------------------------------------------


@pytest.fixture(scope="session")
def chaos_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("chaos-redis"))
    try:
        server.start()
    except (OSError, AssertionError) as exc:
        _unavailable(f"cannot start redis-server: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def chaos_minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMinio]:
    if not Path(MINIO_BIN_DIR, "minio").exists():
        _unavailable(f"no MinIO binary in {MINIO_BIN_DIR} (deploy/local/minio.sh builds it)")
    server = PrivateMinio(
        tmp_path_factory.mktemp("chaos-minio"),
        f"127.0.0.1:{free_port()}",
        f"sgchaos-{uuid.uuid4().hex[:10]}",
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def chaos_dockerd() -> Iterator[PrivateDockerd]:
    engine = PrivateDockerd(DOCKER2_DIR, IMAGES)
    try:
        engine.start()
        engine.load_images()
    except Exception as exc:
        engine.stop()
        _unavailable(f"cannot run a second Docker engine: {exc}")
    try:
        yield engine
    finally:
        engine.stop()


# ---- the grid, once per test --------------------------------------------------------------


@dataclass
class ChaosGrid:
    """The running grid and the services under it."""

    local: LocalGrid
    redis: PrivateRedis
    minio: PrivateMinio
    dockerd: PrivateDockerd

    def client(self) -> Client:
        return Client(self.local.api_url, TOKEN)

    def readies(self, node: str) -> int:
        """How many times the node's Celery consumer said it was ready (one per process)."""
        log = self.local.workdir / f"{node}.log"
        return log.read_text(errors="replace").count(" ready.") if log.exists() else 0

    def start_worker(self, node: str) -> None:
        before = self.readies(node)
        self.local.start_worker(node, concurrency=2)
        self.local.wait(lambda: self.readies(node) > before, f"{node} ready")

    def serving(self) -> set[str]:
        """The nodes the API counts as serving ``python`` (what session creation checks)."""
        got = httpx.get(
            f"{self.local.api_url}/v1/types",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=2,
        )
        types = {t["name"]: t for t in got.json().get("types", [])} if got.is_success else {}
        return set(types.get("python", {}).get("nodes", []))

    def containers(self) -> int:
        client = self.dockerd.client()
        try:
            return sum(
                len(  # sparse: no inspect of a container removed meanwhile
                    client.containers.list(
                        all=True, filters={"label": f"{LABEL_WORKER}={n}"}, sparse=True
                    )
                )
                for n in NODES
            )
        finally:
            client.close()

    def shutdown(self) -> int:
        """Stop the grid as an operator would (workers drain); containers left behind."""
        self.local.stop()
        deadline = time.monotonic() + LEFT_GRACE_S
        while (left := self.containers()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def remove_containers(self) -> None:
        for node in NODES:
            self.dockerd.remove_containers(f"{LABEL_WORKER}={node}")


def local_grid(
    tmp_path: Path,
    redis_url: str,
    minio: PrivateMinio,
    dockerd: PrivateDockerd,
    env: dict[str, str] | None = None,
) -> LocalGrid:
    """The chaos grid's processes (not started) on ``redis_url`` and the suite's
    MinIO and Docker engine (started here if down); ``env`` adds settings."""
    if not minio.ready():
        minio.start()
    dockerd.start()
    settings = {
        **GRID_ENV,
        **(env or {}),
        "DOCKER_HOST": dockerd.host,
        "SANDGRID_MINIO__ENDPOINT": minio.endpoint,
        "SANDGRID_MINIO__BUCKET": minio.bucket,
    }
    return LocalGrid(
        tmp_path / "grid",
        port=free_port(),
        redis_url=redis_url,
        tenants={"chaos": TOKEN},
        env=settings,
    )


@pytest.fixture
def chaos_grid(
    chaos_redis: PrivateRedis,
    chaos_minio: PrivateMinio,
    chaos_dockerd: PrivateDockerd,
    tmp_path: Path,
) -> Iterator[ChaosGrid]:
    """A fresh grid on the suite's services, all of them up and its database empty."""
    chaos_redis.start()
    flush: redis.Redis[bytes] = redis.Redis.from_url(chaos_redis.url())
    flush.flushall()
    flush.close()
    local = local_grid(tmp_path, chaos_redis.url(), chaos_minio, chaos_dockerd)
    with running(ChaosGrid(local, chaos_redis, chaos_minio, chaos_dockerd)) as grid:
        yield grid


@contextmanager
def running(grid: ChaosGrid) -> Iterator[ChaosGrid]:
    """The grid's API and nodes started and serving; stopped, their containers gone, after."""
    try:
        grid.local.start(list(NODES), concurrency=2)
        grid.local.wait(lambda: grid.serving() >= set(NODES), "the workers in /v1/types")
        yield grid
    finally:
        grid.local.stop()
        grid.remove_containers()


# ---- the fault injectors -------------------------------------------------------------------


@pytest.fixture
def kill_worker(chaos_grid: ChaosGrid) -> Callable[[str], Window]:
    """SIGKILL a node's worker and start it again under the same name at once."""

    def kill(node: str) -> Window:
        start = time.monotonic()
        chaos_grid.local.kill(node)
        chaos_grid.start_worker(node)
        return start, time.monotonic()

    return kill


def _outage(stop: Callable[[], None], start: Callable[[], None]) -> Window:
    began = time.monotonic()
    stop()
    time.sleep(DOWN_S)
    start()
    return began, time.monotonic()


@pytest.fixture
def restart_redis(chaos_grid: ChaosGrid) -> Callable[[], Window]:
    """Stop the grid's Redis cleanly (its AOF is flushed), then start it again."""
    r = chaos_grid.redis
    return lambda: _outage(r.stop, r.start)


@pytest.fixture
def restart_minio(chaos_grid: ChaosGrid) -> Callable[[], Window]:
    """Kill the grid's MinIO (what a crash looks like), then start it again."""
    m = chaos_grid.minio
    return lambda: _outage(m.stop, m.start)


@pytest.fixture
def restart_dockerd(chaos_grid: ChaosGrid) -> Callable[[], Window]:
    """Stop the grid's Docker engine (its containers stop with it), then start it again."""
    d = chaos_grid.dockerd
    return lambda: _outage(d.stop, d.start)


# ---- the report ---------------------------------------------------------------------------


@pytest.fixture
def report(capsys: pytest.CaptureFixture[str]) -> Callable[[Accounting], None]:
    """Print a scenario's table to the terminal (even under -q) and keep it if asked."""

    def show(accounting: Accounting) -> None:
        table = accounting.table()
        with capsys.disabled():
            print(f"\n\n{table}\n")
        keep = os.environ.get("SANDGRID_CHAOS_TABLES")
        if keep:
            with open(keep, "a") as f:
                f.write(table + "\n\n")

    return show
