"""What survives a Redis restart, and a Redis that lost everything.

A Redis server of this module's own (its own port, directory and AOF
settings, as ``deploy/local/redis.sh`` starts the grid's), so that killing and
flushing it never disturbs the Redis that other tests and the ``make up`` grid
share. The grid (``sandgrid.localgrid``: the API and one real worker) uses it,
the shared MinIO with a bucket of its own for snapshots and session records.

Every process started here is stopped by its process group, every container
of the grid's node is removed, and the bucket is dropped at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.batch.models import BatchCreate, BatchJob
from sandgrid.client import Client
from sandgrid.errors import NotFound
from sandgrid.localgrid import LocalGrid
from scheduler.batch.store import BatchStore
from scheduler.tenants import TenantStore
from tests.integration.conftest import _unavailable
from tests.integration.test_snapshots_grid import _free_port, wait_for
from worker.quotas import LABEL_WORKER

pytestmark = pytest.mark.integration

API_PORT = int(os.environ.get("SANDGRID_TEST_DURABLE_API_PORT", "8714"))
NODE = "durable-w1"
TOKENS = {"acme": "tok-durable-acme-" + "a" * 24, "globex": "tok-durable-globex-" + "b" * 24}
MINIO = {
    "SANDGRID_MINIO__ENDPOINT": os.environ.get("SANDGRID_MINIO__ENDPOINT", "127.0.0.1:9000"),
    "SANDGRID_MINIO__ACCESS_KEY": os.environ.get("SANDGRID_MINIO__ACCESS_KEY", "sandgrid"),
    "SANDGRID_MINIO__SECRET_KEY": os.environ.get("SANDGRID_MINIO__SECRET_KEY", "sandgrid-secret"),
}
AOF_FSYNC_S = 1.5  # appendfsync everysec: what was written 1.5 s ago is on disk


class PrivateRedis:
    """A redis-server with AOF (appendonly, fsync every second) in its own directory."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port)]
        argv += ["--dir", str(self.state), "--save", "", "--daemonize", "no"]
        argv += ["--appendonly", "yes", "--appendfsync", "everysec"]
        with (self.state / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        wait_for(self.ping, "the private Redis")

    def ping(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis[str]:
        return redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=5)

    def kill(self) -> None:
        """SIGKILL (what a crash looks like): only what the AOF holds comes back."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(20)
            self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    if subprocess.run(["which", "redis-server"], capture_output=True).returncode:
        _unavailable("redis-server is not installed")
    server = PrivateRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


def test_tenants_and_batches_survive_a_restart(own_redis: PrivateRedis) -> None:
    r = own_redis.client()
    r.flushdb()
    token = TenantStore(r, cache_s=0).add("acme")
    job = BatchJob(id="j1", shell="echo hi")
    batch = BatchStore(r).create("acme", BatchCreate(jobs=[job]))
    time.sleep(AOF_FSYNC_S)
    own_redis.restart()
    r = own_redis.client()
    assert TenantStore(r, cache_s=0).authenticate(f"Bearer {token}").name == "acme"
    again = BatchStore(r).get("acme", batch.id)
    assert again.id == batch.id and again.total == 1 and again.tenant == "acme"
    assert again.state == "interrupted"  # found again; no runner holds it (none was started)


@pytest.fixture(scope="module")
def grid(
    own_redis: PrivateRedis, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalGrid]:
    """The API and one worker on the private Redis (Docker and the image checked by
    ``docker_client``)."""
    own_redis.client().flushdb()
    bucket = f"sandgrid-test-durable-{uuid.uuid4().hex[:8]}"
    env = {
        "SANDGRID_LEASE_TTL_S": "4",
        "SANDGRID_HEARTBEAT_S": "0.5",
        "SANDGRID_WORKER__POOL_SIZE": "1",
        "SANDGRID_WORKER__SNAPSHOT_STORE": "minio",
        "SANDGRID_MINIO__BUCKET": bucket,
        **MINIO,
    }
    local = LocalGrid(
        tmp_path_factory.mktemp("grid"),
        port=API_PORT,
        redis_url=own_redis.url,
        tenants=TOKENS,
        env=env,
    )
    try:
        local.start([NODE], concurrency=2)
        yield local
    finally:
        local.stop()
        for c in docker_client.containers.list(
            all=True, filters={"label": f"{LABEL_WORKER}={NODE}"}
        ):
            c.remove(force=True)
        from sandgrid.wire.objects.minio import MinioObjects

        with contextlib.suppress(Exception):
            MinioObjects(
                MINIO["SANDGRID_MINIO__ENDPOINT"],
                MINIO["SANDGRID_MINIO__ACCESS_KEY"],
                MINIO["SANDGRID_MINIO__SECRET_KEY"],
                bucket,
            ).drop_bucket()


def _client(grid: LocalGrid, tenant: str = "acme") -> Client:
    return Client(grid.api_url, token=TOKENS[tenant], timeout=45)


def test_a_session_survives_losing_redis(grid: LocalGrid, own_redis: PrivateRedis) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python", labels={"case": "lost"})
        assert s.exec(shell="echo kept > /workspace/f.txt").exit_code == 0
        before = acme.get_session(s.id)
        assert before.snapshot
        own_redis.client().flushall()  # everything: sessions, leases, tenants' state
        _wait_for_worker(grid)
        again = acme.get_session(s.id)
        assert again.id == s.id and again.snapshot == before.snapshot
        assert again.labels == {"case": "lost"} and again.state in ("idle", "live")
        out = s.exec(shell="cat /workspace/f.txt")
        assert out.exit_code == 0 and out.stdout == "kept\n"
    with _client(grid, "globex") as globex, pytest.raises(NotFound):
        globex.get_session(s.id)


def _wait_for_worker(grid: LocalGrid) -> None:
    """A Redis that lost everything lost the nodes' heartbeats too: until the worker
    beats again (one heartbeat), its type is refused with 503 no_capacity."""
    grid.wait(lambda: NODE in grid.workers_seen(), "the worker's next heartbeat")


def _rebuild(grid: LocalGrid) -> subprocess.CompletedProcess[str]:
    """``sandgrid admin rebuild`` with the grid's settings (the command itself: the
    entry point is held by tests/unit/scheduler/registry/test_registry_records.py, and an
    editable install made before it was added does not list it)."""
    code = "from scheduler.cli import admin; admin(['rebuild'])"
    argv = [sys.executable, "-c", code]
    return subprocess.run(argv, env=grid.env, capture_output=True, text=True, timeout=120)


def test_admin_rebuild_relearns_a_list_of_sessions(
    grid: LocalGrid, own_redis: PrivateRedis
) -> None:
    _wait_for_worker(grid)  # the previous test flushed Redis, heartbeats included
    with _client(grid) as acme:
        sessions = [acme.session(type="python") for _ in range(3)]
        sessions[0].exec(shell="echo 1 > /workspace/one")
        closed = acme.session(type="python")
        closed.close()
        own_redis.client().flushall()
        _wait_for_worker(grid)
        ran = _rebuild(grid)
        assert ran.returncode == 0, ran.stderr
        assert "re-learned" in ran.stdout
        listed = {i.id for i in acme.list_sessions()}
        assert {s.id for s in sessions} <= listed and closed.id not in listed
        again = _rebuild(grid)
        assert "re-learned 0 sessions" in again.stdout, again.stdout
        assert sessions[0].exec(shell="cat /workspace/one").stdout == "1\n"
