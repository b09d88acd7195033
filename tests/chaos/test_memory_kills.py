"""Chaos: a worker killed (SIGKILL) at each point of a pause with memory and its resume.

What it proves (issue 24.5, 24.6): whenever the node dies — while ``runsc
checkpoint`` runs, while the image's chunks are being uploaded, while the next
turn downloads and restores the image — the registry and the store agree: the
session's record names no image that is not whole in the store, its next turn
is answered on the other node from its workspace snapshot (its files there,
the kernel restarted, never a hang), and once it is closed no manifest of it
is left in the store.

Unlike the rest of the chaos suite this runs on the main Docker engine (gVisor
and the ``runsc-restore`` runtime are registered there, not in the suite's
private runc engine), with the MinIO of ``make services`` and a bucket of its
own: the faults are the worker's death, not the services'. The kill points are
found from outside, without hooks in the worker: the ``runsc checkpoint``
process of the session's container, the first chunk of the tenant in the
bucket before the image's manifest, the session's lease taken by a node for
the turn that restores it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandgrid.client import Client, Session
from sandgrid.errors import SandgridError
from sandgrid.localgrid import LocalGrid
from sandgrid.models import Quotas
from sandgrid.wire.objects import keys
from tests.support.memory_grid import memory_grid, minio_objects, store_env

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.runsc]

API_PORT = int(os.environ.get("SANDGRID_TEST_MEMORY_CHAOS_API_PORT", "8774"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODES = ("memkill-w1", "memkill-w2")
TOKEN = "tok-memkill-" + "k" * 24
BUCKET = f"sandgrid-test-memkill-{uuid.uuid4().hex[:8]}"
ENV = {
    "SANDGRID_LEASE_TTL_S": "4",
    "SANDGRID_HEARTBEAT_S": "0.5",
    "SANDGRID_WORKER__POOL_SIZE": "1",
    "SANDGRID_WORKER__METRICS_PORT": "0",
    **store_env(BUCKET),
}
MB = 150
"""Arrays in the kernel: an image of about 2x this, so each phase lasts long enough to hit."""
SETUP = f"import numpy as np\nbig = np.random.default_rng(1).random({MB} * (1 << 20) // 8)\nv = 3"
POLL_S = 0.02
CHECKPOINTING = "runsc --root .* checkpoint .*--image-path"
"""The command line of the worker's ``runsc checkpoint`` (``DockerRunsc.checkpoint``)."""


@pytest.fixture(scope="module")
def main_docker() -> Any:
    """The main engine (the chaos suite's own has no gVisor): skipped when it is not up."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        pytest.skip(f"Docker is not available: {exc}")
    return client


@pytest.fixture(scope="module")
def grid(main_docker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    where = tmp_path_factory.mktemp("memkill")
    local = LocalGrid(where, port=API_PORT, redis_url=REDIS_URL, tenants={"acme": TOKEN}, env=ENV)
    with memory_grid(
        main_docker, local, bucket=BUCKET, start=NODES, nodes=NODES, types="python-gvisor",
        concurrency=2,
    ) as started:  # fmt: skip
        yield started


def _both_up(grid: LocalGrid) -> None:
    for node in NODES:
        if node not in grid.procs:
            grid.start_worker(node, types="python-gvisor", concurrency=2)
    grid.wait(lambda: set(NODES) <= grid.workers_seen(), "both nodes")


def _session(client: Client) -> Session:
    s = client.session(type="python-gvisor", quotas=Quotas(memory_mb=4 * MB + 512, timeout_s=300))
    assert s.run_code(SETUP, timeout_s=300).error is None
    assert s.exec(shell="echo kept > /workspace/f.txt").exit_code == 0
    return s


Point = Callable[[], str | None]
"""Polled until it names the node to kill (the kill point is reached there)."""


def _kill_during(grid: LocalGrid, call: Callable[[], object], point: Point) -> str:
    """Run ``call`` on a thread; when ``point`` names a node, SIGKILL that node. The node."""

    def run() -> None:
        with contextlib.suppress(SandgridError):  # the pause's turn may fail with its worker
            call()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while (node := point()) is None:
        assert thread.is_alive() and time.monotonic() < deadline, "the kill point was missed"
        time.sleep(POLL_S)
    grid.kill(node, signal.SIGKILL)
    thread.join(180)
    assert not thread.is_alive(), "the call hung after its worker died"
    return node


def _agree(s: Session, killed: str) -> None:
    """The next turn is answered on the other node (from the workspace, or from the image
    when the kill came before anything took it); the record names no image then;
    after the close, no manifest of the session is left in the store."""
    again = s.run_code("v")
    assert again.node != killed and again.node in NODES, again
    info = s.refresh()
    assert info.memory_image is None, info
    if info.memory_restored:  # killed before it took the image: restored whole elsewhere
        assert again.result == "3", again
    else:  # from the workspace: a new kernel, without the variable
        assert again.result != "3", again
    assert s.exec(shell="cat /workspace/f.txt").stdout == "kept\n"
    assert s.run_code("1 + 1").result == "2"
    s.close()  # the close's deletions run on a worker after the answer: wait for them
    objects, deadline = minio_objects(BUCKET), time.monotonic() + 30
    while left := objects.list(keys.memory_prefix("acme", s.id)):
        assert time.monotonic() < deadline, f"left in the store after the close: {left}"
        time.sleep(0.5)


def _owner_node(s: Session) -> str | None:
    owner = s.refresh().owner
    return owner if owner in NODES else None


def test_a_kill_during_the_checkpoint(grid: LocalGrid) -> None:
    _both_up(grid)
    with Client(grid.api_url, token=TOKEN, timeout=300) as client:
        s = _session(client)
        node = _owner_node(s) or ""

        def checkpointing() -> str | None:  # this module's pauses are the host's only ones
            found = subprocess.run(["pgrep", "-f", CHECKPOINTING], capture_output=True)
            return node if found.returncode == 0 else None

        killed = _kill_during(grid, lambda: s.pause(memory=True), checkpointing)
        _agree(s, killed)


def test_a_kill_during_the_upload(grid: LocalGrid) -> None:
    _both_up(grid)
    objects = minio_objects(BUCKET)
    with Client(grid.api_url, token=TOKEN, timeout=300) as client:
        s = _session(client)
        node = _owner_node(s) or ""
        before = set(objects.list(keys.memory_chunks_prefix("acme")))

        def uploading() -> str | None:
            new = set(objects.list(keys.memory_chunks_prefix("acme"))) - before
            return node if new else None

        killed = _kill_during(grid, lambda: s.pause(memory=True), uploading)
        assert objects.list(keys.memory_prefix("acme", s.id)) == []  # no manifest was written
        _agree(s, killed)


def test_a_kill_during_the_download_and_restore(grid: LocalGrid) -> None:
    _both_up(grid)
    with Client(grid.api_url, token=TOKEN, timeout=300) as client:
        s = _session(client)
        done = s.pause(memory=True)
        assert done.memory, done
        killed = _kill_during(grid, lambda: s.run_code("v"), lambda: _owner_node(s))
        _agree(s, killed)
