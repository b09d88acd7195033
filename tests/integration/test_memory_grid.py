"""Memory snapshots on a real grid (issue 24): pause with memory, resume on the other node.

The API and two worker nodes (``mem-w1``, ``mem-w2``) on the real Docker with
gVisor (``python-gvisor``), Redis and the MinIO of ``make services`` (a bucket
of this module's own, dropped at the end). A session's Jupyter variables, a
background HTTP server on the sandbox's loopback and a counter process are
paused with memory on ``mem-w1``, which then stops; ``mem-w2`` takes the next
turn and everything carries on. An image corrupted in MinIO is refused and the
session falls back to its workspace snapshot, saying why; another tenant cannot
pause the session; a runc type asking for memory is told which runtime it is on.
A session created with ``on_idle: "memory"`` is paused that way when it goes idle.
"""

from __future__ import annotations

import functools
import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sandgrid.client import Client, Session
from sandgrid.errors import InvalidInput, NotFound
from sandgrid.localgrid import LocalGrid
from sandgrid.wire.objects import keys
from tests.support.memory_grid import memory_grid, minio_objects, store_env

pytestmark = [pytest.mark.integration, pytest.mark.runsc]

API_PORT = int(os.environ.get("SANDGRID_TEST_MEMORY_API_PORT", "8771"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODES = ("mem-w1", "mem-w2")
TYPES = "python,python-gvisor"
TOKENS = {"acme": "tok-mem-acme-" + "a" * 24, "globex": "tok-mem-globex-" + "b" * 24}
IDLE_TTL_S = 8.0
"""Long enough that no test's own pauses between turns count as idle on a loaded host."""
BUCKET = f"sandgrid-test-memory-{uuid.uuid4().hex[:8]}"
ENV = {
    "SANDGRID_LEASE_TTL_S": "6",
    "SANDGRID_HEARTBEAT_S": "0.5",
    "SANDGRID_WORKER__IDLE_TTL_S": str(IDLE_TTL_S),
    "SANDGRID_WORKER__REAP_INTERVAL_S": "0.5",
    "SANDGRID_WORKER__POOL_SIZE": "1",
    "SANDGRID_WORKER__METRICS_PORT": "0",
    **store_env(BUCKET),
}
_local_grid = functools.partial(LocalGrid, port=API_PORT, redis_url=REDIS_URL, tenants=TOKENS)
FETCH = (
    'python3 -c "import urllib.request as u; '
    "print(u.urlopen('http://127.0.0.1:8765/page.txt', timeout=5).read().decode())\""
)


def _objects() -> Any:
    return minio_objects(BUCKET)


@pytest.fixture(scope="module")
def grid(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    """The API and ``mem-w1``; the first test starts ``mem-w2`` and stops ``mem-w1``."""
    local = _local_grid(tmp_path_factory.mktemp("memory"), env=ENV)
    with memory_grid(
        docker_client,
        local,
        bucket=BUCKET,
        start=NODES[:1],
        nodes=NODES,
        types=TYPES,
        concurrency=4,
    ) as started:
        yield started


def _client(grid: LocalGrid, tenant: str = "acme") -> Client:
    return Client(grid.api_url, token=TOKENS[tenant], timeout=90)


def _numbers(text: str) -> list[int]:
    return [int(line) for line in text.split()]


def _serve(s: Session) -> None:
    """A background HTTP server on the sandbox's loopback, answering once it is up."""
    assert s.exec(shell="echo warm > /workspace/page.txt").exit_code == 0
    argv = ["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"]
    s.exec(argv, cwd="/workspace", background=True)
    wait = f"for i in $(seq 50); do {FETCH} && exit 0; sleep 0.2; done; exit 1"
    assert s.exec(shell=wait).exit_code == 0


def test_memory_survives_pause_and_resume_on_the_other_node(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        first = s.run_code("data = [i * i for i in range(200000)]\nx = 41")
        assert first.error is None and first.node == NODES[0]
        _serve(s)
        counter = s.exec(shell="i=0; while true; do echo $i; i=$((i+1)); sleep 0.1; done",
                         background=True)  # fmt: skip
        before = _numbers(counter.logs().data)

        done = s.pause(memory=True)
        assert done.released and done.memory and (done.memory_bytes or 0) > 0, done
        paused = s.refresh()
        assert paused.memory_image and paused.owner is None

        grid.start_worker(NODES[1], types=TYPES, concurrency=4)
        grid.wait(lambda: NODES[1] in grid.workers_seen(), "the second node")
        grid.kill(NODES[0], signal.SIGTERM)  # the first node is gone: the other resumes

        again = s.run_code("x + 1, len(data), data[-1]")
        assert again.node == NODES[1] and again.kernel_restarted is False, again
        assert again.error is None and again.result == f"(42, 200000, {199999 * 199999})"
        resumed = s.refresh()
        assert resumed.memory_restored is True and resumed.memory_image is None, resumed
        served = s.exec(shell=FETCH)
        assert served.exit_code == 0 and served.stdout.strip() == "warm", served
        after = _numbers(counter.logs().data)  # the same handle: its process carries on
        assert after[: len(before)] == before and after == list(range(len(after)))
        assert len(after) > len(before)
        s.close()


def test_a_corrupt_image_is_refused_and_the_workspace_comes_back(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        assert s.run_code("y = 7").error is None
        assert s.exec(shell="echo kept > /workspace/f.txt").exit_code == 0
        done = s.pause(memory=True)
        assert done.memory, done
        image = s.refresh().memory_image
        assert image
        _objects().put(keys.memory_image_key("acme", s.id, image), b"not the image at all")

        again = s.run_code("y")
        assert again.kernel_restarted is True or again.error is not None, again
        info = s.refresh()
        assert info.memory_restored is False and "verification" in (info.memory_reason or "")
        assert s.exec(shell="cat /workspace/f.txt").stdout == "kept\n"
        assert s.run_code("1 + 1").result == "2"  # the session goes on
        s.close()


def test_a_corrupt_chunk_is_refused_and_the_workspace_comes_back(grid: LocalGrid) -> None:
    objects = _objects()
    before = set(objects.list(keys.memory_chunks_prefix("acme")))
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        assert s.run_code("w = 9").error is None
        assert s.exec(shell="echo kept > /workspace/g.txt").exit_code == 0
        assert s.pause(memory=True).memory
        new = sorted(set(objects.list(keys.memory_chunks_prefix("acme"))) - before)
        assert new, "the pause stored no chunk of its own"
        objects.put(new[0], b"not the chunk")  # one chunk of the image changed in MinIO

        again = s.run_code("w")
        assert again.kernel_restarted is True or again.error is not None, again
        info = s.refresh()
        assert info.memory_restored is False and "chunk" in (info.memory_reason or ""), info
        assert s.exec(shell="cat /workspace/g.txt").stdout == "kept\n"
        assert s.run_code("2 + 2").result == "4"
        s.close()


def test_another_tenant_cannot_pause_the_session(grid: LocalGrid) -> None:
    with _client(grid) as acme, _client(grid, "globex") as globex:
        s = acme.session(type="python-gvisor")
        assert s.exec(shell="true").exit_code == 0
        with pytest.raises(NotFound):
            globex.pause(s.id, memory=True)
        assert s.refresh().memory_image is None
        s.close()


def test_a_runc_type_is_told_its_runtime_cannot_save_memory(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python")
        assert s.exec(shell="echo a > /workspace/a").exit_code == 0
        with pytest.raises(InvalidInput, match="runs on runc"):
            s.pause(memory=True)
        assert s.exec(shell="cat /workspace/a").stdout == "a\n"  # still usable
        s.close()


def test_an_idle_session_is_paused_with_its_memory(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor", on_idle="memory")
        assert s.run_code("z = 5").error is None
        counter = s.exec(shell="i=0; while true; do echo $i; i=$((i+1)); sleep 0.1; done",
                         background=True)  # fmt: skip
        # a background process would keep a released session here; memory takes it along
        grid.wait(lambda: s.refresh().memory_image is not None, "the idle pause", timeout=60)
        assert s.refresh().owner is None
        again = s.run_code("z * 2")
        assert again.result == "10" and again.kernel_restarted is False, again
        assert s.refresh().memory_restored is True
        numbers = _numbers(counter.logs().data)
        assert numbers == list(range(len(numbers))) and len(numbers) > 10
        s.close()


def test_on_idle_memory_on_a_runc_type_is_422(grid: LocalGrid) -> None:
    with _client(grid) as acme, pytest.raises(InvalidInput, match="runs on runc"):
        acme.session(type="python", on_idle="memory")


def _both_up(grid: LocalGrid) -> None:
    for node in NODES:
        if node not in grid.procs:
            grid.start_worker(node, types=TYPES, concurrency=4)
    grid.wait(lambda: set(NODES) <= grid.workers_seen(), "both nodes")


def _paused_and_staged(acme: Client, grid: LocalGrid, setup: str) -> tuple[Session, str, str]:
    """A gVisor session that ran ``setup``, paused with memory and staged: the session,
    the node it was paused on and the other node, which staged its image."""
    s = acme.session(type="python-gvisor")
    assert s.run_code(setup).error is None
    paused_on = s.refresh().owner or ""
    other = next(n for n in NODES if n != paused_on)
    assert s.pause(memory=True).memory
    grid.wait(lambda: s.refresh().memory_staged_on == other, "the image staged", timeout=60)
    return s, paused_on, other


def _restore_line(grid: LocalGrid, node: str, s: Session) -> str:
    """``node``'s log line of the restore of ``s``'s memory image."""
    log = (grid.workdir / f"{node}.log").read_text(errors="replace")
    return next(x for x in log.splitlines() if f"session {s.id}: memory image fetched" in x)


def test_a_paused_image_is_staged_on_the_other_node_and_the_resume_goes_there(
    grid: LocalGrid,
) -> None:
    """24.1, resume speed: the pause asks the other node to stage the image; the next
    turn is routed there (the pausing node still lives) and takes the staged files
    instead of fetching them. It leaves both nodes up (the next test needs them)."""
    _both_up(grid)
    with _client(grid) as acme:
        s, _, other = _paused_and_staged(acme, grid, "kept = list(range(1000))")

        again = s.run_code("sum(kept)")
        assert again.node == other and again.kernel_restarted is False, again
        assert again.result == str(sum(range(1000)))
        info = s.refresh()
        assert info.memory_restored is True and info.memory_image is None, info
        line = _restore_line(grid, other, s)
        assert "0 chunks from the store; staged here: True" in line, line
        s.close()


def test_a_staging_node_that_dies_leaves_the_resume_to_the_store(grid: LocalGrid) -> None:
    """The node that staged the image is gone: the record still names it, but the
    turn goes to a live node, which fetches the image from the store and restores it."""
    _both_up(grid)
    with _client(grid) as acme:
        s, paused_on, other = _paused_and_staged(acme, grid, "left = 'here'")
        grid.kill(other, signal.SIGKILL)

        again = s.run_code("left")
        assert again.node == paused_on and again.kernel_restarted is False, again
        assert again.result == "'here'"
        assert s.refresh().memory_restored is True
        line = _restore_line(grid, paused_on, s)
        assert "staged here: False" in line and " 0 chunks from the store" not in line, line
        s.close()
