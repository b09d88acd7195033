"""Two Docker engines as two real nodes (issue 15, item 3).

Node ``eng-a`` drives the main engine, node ``eng-b`` the suite's second
engine (``deploy/local/docker2.sh``: its own data root, exec root, pid file and
socket, the images loaded into it). A session starts on ``eng-a``; ``eng-a`` is
killed; the session goes on on ``eng-b`` from its snapshot in MinIO, which is
all the two nodes share. Orphan collection stays on its own engine: a node
restarted removes its own leftovers on its engine and leaves alone a container
carrying its label on the other engine.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import redis

from sandgrid.client import Client
from sandgrid.localgrid import LocalGrid
from tests.chaos.conftest import GRID_ENV, NODE_TTL_S, TOKEN
from tests.chaos.services import PrivateDockerd, PrivateRedis, free_port
from tests.integration.test_snapshots_grid import PrivateMinio
from worker.quotas import LABEL_INCARNATION, LABEL_MANAGED, LABEL_WORKER

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

NODE_A, NODE_B = "eng-a", "eng-b"
IMAGE = "sandgrid/sandbox-python:latest"


def ids(engine: Any, node: str) -> set[str]:
    """The containers of ``node`` on ``engine``: the listing alone (``sparse``), so a
    container the node removes meanwhile is not inspected after it is gone (404)."""
    label = {"label": f"{LABEL_WORKER}={node}"}
    found = engine.containers.list(all=True, filters=label, sparse=True)
    return {c.id for c in found}


def leftover(engine: Any, node: str) -> str:
    """A running container labelled as ``node``'s, of a past incarnation: what a
    worker leaves when it dies while its engine cannot remove containers."""
    labels = {LABEL_MANAGED: "1", LABEL_WORKER: node, LABEL_INCARNATION: "gone"}
    c = engine.containers.run(
        IMAGE, ["sleep", "600"], detach=True, network_mode="none", labels=labels
    )
    return str(c.id)


@pytest.fixture
def grid(
    chaos_redis: PrivateRedis, chaos_minio: PrivateMinio, tmp_path: Path
) -> Iterator[LocalGrid]:
    chaos_redis.start()
    if not chaos_minio.ready():
        chaos_minio.start()
    flush: redis.Redis[bytes] = redis.Redis.from_url(chaos_redis.url())
    flush.flushall()
    flush.close()
    env = {
        **GRID_ENV,
        "SANDGRID_MINIO__ENDPOINT": chaos_minio.endpoint,
        "SANDGRID_MINIO__BUCKET": chaos_minio.bucket,
    }
    local = LocalGrid(
        tmp_path / "grid",
        port=free_port(),
        redis_url=chaos_redis.url(),
        tenants={"chaos": TOKEN},
        env=env,
    )
    try:
        local.spawn("api", "serve", "--host", "127.0.0.1", "--port", str(local.port))
        yield local
    finally:
        local.stop()


def test_a_session_goes_on_on_the_other_engine(
    grid: LocalGrid, chaos_dockerd: PrivateDockerd
) -> None:
    engine_a, engine_b = docker.from_env(timeout=60), chaos_dockerd.client()
    try:
        grid.start_worker(NODE_A, concurrency=2)
        grid.wait(lambda: NODE_A in grid.workers_seen(), f"{NODE_A} in /v1/health")
        with Client(grid.api_url, TOKEN) as client:
            session = client.session("python")
            first = session.exec(shell="echo moved > note.txt && cat note.txt")
            assert (first.node, first.stdout) == (NODE_A, "moved\n")

            grid.start_worker(NODE_B, concurrency=2, env={"DOCKER_HOST": chaos_dockerd.host})
            grid.wait(lambda: NODE_B in grid.workers_seen(), f"{NODE_B} in /v1/health")
            assert ids(engine_a, NODE_A) and not ids(engine_b, NODE_A)  # A's sandboxes: on A
            grid.kill(NODE_A)
            time.sleep(NODE_TTL_S)

            moved = session.exec(shell="cat note.txt")
            assert (moved.node, moved.stdout) == (NODE_B, "moved\n")  # from the snapshot
            on_b = ids(engine_b, NODE_B)
            assert on_b and not ids(engine_a, NODE_B)

            # Leftovers of each node on its own engine, and look-alikes on the other one.
            own_a, decoy_on_b = leftover(engine_a, NODE_A), leftover(engine_b, NODE_A)
            grid.start_worker(NODE_A, concurrency=2)  # a new incarnation collects at start
            grid.wait(lambda: own_a not in ids(engine_a, NODE_A), f"{NODE_A}'s leftover gone")
            assert decoy_on_b in ids(engine_b, NODE_A)  # engine B is none of eng-a's business
            assert on_b <= ids(engine_b, NODE_B)

            own_b, decoy_on_a = leftover(engine_b, NODE_B), leftover(engine_a, NODE_B)
            grid.kill(NODE_B)
            grid.start_worker(NODE_B, concurrency=2, env={"DOCKER_HOST": chaos_dockerd.host})
            grid.wait(lambda: own_b not in ids(engine_b, NODE_B), f"{NODE_B}'s leftover gone")
            assert decoy_on_a in ids(engine_a, NODE_B)

            again = session.exec(shell="cat note.txt")  # from the snapshot, on either node
            assert again.stdout == "moved\n" and again.node in (NODE_A, NODE_B)
            session.close()
    finally:
        with contextlib.suppress(Exception):
            grid.stop()
        for engine in (engine_a, engine_b):
            for cid in ids(engine, NODE_A) | ids(engine, NODE_B):
                with contextlib.suppress(Exception):
                    engine.api.remove_container(cid, force=True)
            engine.close()
