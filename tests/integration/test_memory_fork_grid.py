"""Fork and checkpoints with memory on a real grid (issue 24.2, 24.3, 24.6).

The API and two worker nodes (``fork-w1``, ``fork-w2``) on the real Docker with
gVisor (``python-gvisor``), Redis and the MinIO of ``make services`` (a bucket
of this module's own, dropped at the end). A session with a Jupyter variable,
a background HTTP server on its loopback and a counter process is forked x4
with memory: every fork finds all three, on whichever node restores it, while
the source keeps running; a write in one fork (a variable, a file) is seen in
no other. Another tenant cannot fork it; a count above the tenant's ceiling and
memory on a runc type are 422. A checkpoint with memory brings the processes
back at its restore, again after they were changed. Forks restored on one node
fetch each chunk of their image from MinIO once (the node's chunk cache).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import time
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

API_PORT = int(os.environ.get("SANDGRID_TEST_MEMORY_FORK_API_PORT", "8773"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODES = tuple(f"fork-w{n}" for n in (1, 2))
TOKENS = {tenant: f"tok-fork-{tenant}-" + tenant[0] * 24 for tenant in ("acme", "globex")}
TYPES = "python,python-gvisor"
BUCKET = f"sandgrid-test-memfork-{uuid.uuid4().hex[:8]}"
ENV = {
    "SANDGRID_LEASE_TTL_S": "6",
    "SANDGRID_HEARTBEAT_S": "0.5",
    "SANDGRID_WORKER__POOL_SIZE": "1",
    "SANDGRID_WORKER__METRICS_PORT": "0",
    **store_env(BUCKET),
}
FETCH = (
    'python3 -c "import urllib.request as u; '
    "print(u.urlopen('http://127.0.0.1:8765/page.txt', timeout=5).read().decode())\""
)
COUNTER = "i=0; while true; do echo $i >> /tmp/count.log; i=$((i+1)); sleep 0.1; done"


@pytest.fixture(scope="module")
def grid(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    """The API and both nodes, two turns at a time each (so four forks spread)."""
    where = tmp_path_factory.mktemp("memfork")
    local = LocalGrid(where, port=API_PORT, redis_url=REDIS_URL, tenants=TOKENS, env=ENV)
    with memory_grid(
        docker_client, local, bucket=BUCKET, start=NODES, nodes=NODES, types=TYPES, concurrency=2
    ) as started:
        yield started


def _client(grid: LocalGrid, tenant: str = "acme") -> Client:
    return Client(grid.api_url, token=TOKENS[tenant], timeout=120)


def _counts(s: Session) -> list[int]:
    return [int(n) for n in s.exec(shell="cat /tmp/count.log").stdout.split()]


def _warm(s: Session) -> None:
    """A variable, a background HTTP server answering, a counter process counting."""
    assert s.run_code("x = 41\ndata = [i * i for i in range(100000)]").error is None
    assert s.exec(shell="echo warm > /workspace/page.txt").exit_code == 0
    argv = ["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1"]
    s.exec(argv, cwd="/workspace", background=True)
    wait = f"for i in $(seq 50); do {FETCH} && exit 0; sleep 0.2; done; exit 1"
    assert s.exec(shell=wait).exit_code == 0
    s.exec(shell=COUNTER, background=True)
    time.sleep(0.5)


def _still_warm(s: Session) -> str:
    """Everything ``_warm`` made is there and running; the node that answered."""
    first = s.run_code("x + 1, len(data), data[-1]")
    assert first.error is None and first.kernel_restarted is False, first
    assert first.result == f"(42, 100000, {99999 * 99999})", first
    served = s.exec(shell=FETCH)
    assert served.exit_code == 0 and served.stdout.strip() == "warm", served
    before = _counts(s)
    time.sleep(0.6)
    after = _counts(s)
    assert after[: len(before)] == before and after == list(range(len(after))), after
    assert len(after) > len(before), (before, after)
    return first.node or ""


def test_a_fork_of_four_carries_every_process_and_each_is_its_own(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        _warm(s)
        forks = s.fork(4, memory=True)
        assert len({f.id for f in forks}) == 4 and s.id not in {f.id for f in forks}
        for f in forks:
            assert f.info.forked_from == s.id and f.info.memory_image, f.info
        assert _still_warm(s)  # the source kept running

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            nodes = list(pool.map(_still_warm, forks))
        assert set(nodes) == set(NODES), nodes  # restored on both nodes
        for f in forks:
            info = f.refresh()
            assert info.memory_restored is True and info.memory_image is None, info

        assert forks[0].run_code("x = 100").error is None
        assert forks[0].exec(shell="echo mine > /workspace/mine.txt").exit_code == 0
        for other in (*forks[1:], s):
            assert other.run_code("x").result == "41"
            assert other.exec(shell="test -e /workspace/mine.txt").exit_code == 1
        assert forks[0].run_code("x").result == "100"
        for f in (*forks, s):
            f.close()


def test_another_tenant_cannot_fork_the_session(grid: LocalGrid) -> None:
    with _client(grid) as acme, _client(grid, "globex") as globex:
        s = acme.session(type="python-gvisor")
        assert s.run_code("secret = 1").error is None
        with pytest.raises(NotFound):
            globex.fork(s.id, 2, memory=True)
        with pytest.raises(NotFound):
            globex.fork(s.id, 1)
        assert [x for x in globex.list_sessions() if x.forked_from == s.id] == []
        s.close()


def test_a_count_over_the_ceiling_and_runc_memory_are_422(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        assert s.exec(shell="true").exit_code == 0
        with pytest.raises(InvalidInput, match="at most 32") as over:
            s.fork(33, memory=True)
        assert over.value.context.get("field") == "count"
        r = acme.session(type="python")
        assert r.exec(shell="echo a > /workspace/a").exit_code == 0
        with pytest.raises(InvalidInput, match="runs on runc"):
            r.fork(2, memory=True)
        (copy,) = r.fork(1)  # a workspace fork of a runc session is fine
        assert copy.exec(shell="cat /workspace/a").stdout == "a\n"
        before = {x.id for x in acme.list_sessions()}
        assert before == {s.id, r.id, copy.id}  # the refused forks made no session
        for x in (s, r, copy):
            x.close()


def test_a_checkpoint_with_memory_brings_the_processes_back(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        _warm(s)
        kept = s.checkpoint("warm", memory=True)
        assert kept.memory and (kept.memory_bytes or 0) > 0, kept
        assert s.run_code("x = 0\ndel data").error is None  # changed after the checkpoint
        stop = "pkill -f '[h]ttp.server'; echo gone > /workspace/page.txt"
        assert s.exec(shell=stop).exit_code == 0

        s.restore("warm")
        _still_warm(s)
        assert s.refresh().memory_restored is True
        assert s.run_code("x = 7").error is None
        s.restore("warm")  # a checkpoint restores again: its image is not used up
        assert s.run_code("x").result == "41"
        with _client(grid, "globex") as globex:  # another tenant can neither take nor restore one
            with pytest.raises(NotFound):
                globex.checkpoint(s.id, "theirs", memory=True)
            with pytest.raises(NotFound):
                globex.restore(s.id, "warm")
        assert s.run_code("x").result == "41" and s.refresh().memory_image is None
        s.close()


def _fetched_from_store(grid: LocalGrid, node: str, sessions: set[str]) -> list[int]:
    """Per restore of ``sessions`` on ``node``, the chunks it took from the store (its log)."""
    line = re.compile(r"session (\S+): memory image fetched in \d+ ms \((\d+) chunks from the")
    text = (grid.workdir / f"{node}.log").read_text(errors="replace")
    return [int(n) for sid, n in line.findall(text) if sid in sessions]


def test_forks_restored_on_one_node_fetch_each_chunk_once(grid: LocalGrid) -> None:
    with _client(grid) as acme:
        s = acme.session(type="python-gvisor")
        setup = "import os\nblob = os.urandom(24 << 20)\nmark = blob[:8].hex()"
        assert s.run_code(setup).error is None  # pages of its own: no other test's chunks
        mark = s.run_code("mark").result
        forks = s.fork(4, memory=True)
        objects = minio_objects(BUCKET)
        (manifest,) = objects.list(keys.memory_prefix("acme", forks[0].id))
        files = json.loads(objects.get(manifest))["files"]
        chunks = {row[0] for rows in files.values() for row in rows}
        assert len(chunks) >= 4, files  # 24 MiB of random pages: several chunks

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda f: f.run_code("mark"), forks))
        assert {a.result for a in answers} == {mark}, answers
        assert all(a.kernel_restarted is False for a in answers), answers
        ids = {f.id for f in forks}
        per_node = {node: _fetched_from_store(grid, node, ids) for node in NODES}
        assert sum(len(r) for r in per_node.values()) == 4, per_node  # every restore logged
        assert max(len(r) for r in per_node.values()) >= 2, per_node  # a node restored two
        for node, restores in per_node.items():
            # Without the cache each restore fetches every chunk: len(restores) * len(chunks).
            assert sum(restores) <= len(chunks), (node, restores, len(chunks))
        for f in (*forks, s):
            f.close()
