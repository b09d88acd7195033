"""Background processes through a real grid: API, Celery, two workers, runc.

The grid is this module's own (``sandgrid.localgrid``, its own port and Redis
database), with a short idle TTL, so that residency is seen to hold: a session
with a live background process stays on its node, one without is released.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sandgrid.client import Client
from sandgrid.errors import Conflict, ErrorCode, LimitExceeded, SandboxLost
from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_BG_API_PORT", "8733"))
REDIS_URL = os.environ.get("SANDGRID_TEST_BG_REDIS_URL", "redis://127.0.0.1:6379/13")
NODES = ("bg-w1", "bg-w2")
TOKEN = "tok-bg-" + "e" * 24
IDLE_TTL_S = 1.5

FETCH = (
    "import time, urllib.request\n"
    "for _ in range(100):\n"
    "    try:\n"
    "        print(urllib.request.urlopen('http://127.0.0.1:8766/').read().decode(), end='')\n"
    "        break\n"
    "    except OSError:\n"
    "        time.sleep(0.1)\n"
)


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    grid = LocalGrid(
        tmp_path_factory.mktemp("bggrid"),
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"bg": TOKEN},
        env={
            "SANDGRID_WORKER__POOL_SIZE": "1",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_WORKER__IDLE_TTL_S": str(IDLE_TTL_S),
            "SANDGRID_WORKER__REAP_INTERVAL_S": "0.5",
            "SANDGRID_HEARTBEAT_S": "0.5",
            "SANDGRID_LEASE_TTL_S": "4",
        },
    )
    try:
        grid.start(list(NODES), concurrency=2)
        yield grid
    finally:
        grid.stop()
        _remove_leftovers()
        r.flushdb()
        r.close()


def _remove_leftovers() -> None:
    """Remove what a killed worker's in-flight create left (dockerd finishes it after
    the worker died, possibly after its successor collected its orphans)."""
    import docker

    client = docker.from_env()
    labels = {"label": ["sandgrid.managed=1"]}
    quiet = 0
    while quiet < 2:
        rows = [
            row
            for row in client.api.containers(all=True, filters=labels)
            if row["Labels"].get("sandgrid.worker") in NODES
        ]
        for row in rows:
            client.api.remove_container(row["Id"], force=True)
        quiet = quiet + 1 if not rows else 0
        time.sleep(0.5)
    client.close()


@pytest.fixture
def client(grid: LocalGrid) -> Iterator[Client]:
    with Client(grid.api_url, TOKEN) as c:
        yield c


def test_start_steer_and_reattach_from_another_client(client: Client, grid: LocalGrid) -> None:
    with client.session(type="python") as s:
        p = s.exec(shell="echo started; read line; echo got $line; exit 5", background=True)
        assert p.info.running and p.info.node in NODES and p.sandbox
        assert [x.pid for x in s.processes()] == [p.pid]
        with Client(grid.api_url, TOKEN) as other:  # any client that has the handle's facts
            q = other.process(s.id, p.pid, p.sandbox)
            assert q.send_stdin("x\n") == 2
            done = q.wait(timeout=30)
        assert (done.running, done.exit_code) == (False, 5)
        logs = p.logs()
        assert logs.data == "started\ngot x\n" and logs.offset == len(logs.data)
        assert p.logs(since=8).data == "got x\n"


def test_a_live_process_keeps_its_session_resident_and_its_port_open(client: Client) -> None:
    with client.session(type="python") as busy, client.session(type="python") as idle:
        idle.exec(shell="true")
        busy.exec(shell="mkdir -p site && echo served > site/index.html")
        server = busy.exec(
            argv=["python3", "-m", "http.server", "8766", "-b", "127.0.0.1"],
            cwd="site",
            background=True,
        )
        owner = server.info.node
        deadline = time.monotonic() + 60
        while idle.refresh().owner is not None:  # the idle TTL passes: it is released
            assert time.monotonic() < deadline, "the idle session was never released"
            time.sleep(0.2)
        assert busy.refresh().owner == owner  # ... but not the one with a live process
        r = busy.exec(python=FETCH, timeout_s=20)
        assert (r.stdout, r.node) == ("served\n", owner)
        assert server.kill().sandbox == server.sandbox
        assert not server.wait(timeout=30).running
    with pytest.raises(Conflict) as err:  # closed: its processes went with its sandbox
        server.logs()
    assert err.value.code == ErrorCode.SESSION_CLOSED


def test_the_live_limit_holds_through_the_api(client: Client, grid: LocalGrid) -> None:
    with client.session(type="python", quotas={"background_processes": 1}) as s:
        first = s.exec(argv=["sleep", "60"], background=True)
        with pytest.raises(LimitExceeded) as err:
            s.exec(argv=["sleep", "60"], background=True)
        assert err.value.context["field"] == "quotas.background_processes"
        ps = subprocess.run(
            [sys.executable, "-m", "sandgrid.cli", "ps", s.id],
            env={**grid.env, "SANDGRID_TOKEN": TOKEN, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ps.returncode == 0 and str(first.pid) in ps.stdout and "sleep 60" in ps.stdout
        first.kill("KILL")
        first.wait(timeout=30)
        s.exec(argv=["true"], background=True).wait(timeout=30)


def test_process_lost_at_once_when_its_node_dies(client: Client, grid: LocalGrid) -> None:
    with client.session(type="python") as s:
        p = s.exec(argv=["sleep", "600"], background=True)
        node = p.info.node
        grid.kill(node)
        r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        grid.wait(lambda: not r.exists(names.node_key(node)), f"{node}'s heartbeat to lapse")
        for call in (p.logs, lambda: p.wait(timeout=600), p.kill):
            with pytest.raises(SandboxLost) as err:
                call()
            assert err.value.code == ErrorCode.PROCESS_LOST
        assert s.processes() == []
        r.close()
    grid.start_worker(node, concurrency=2)
    grid.wait(lambda: node in grid.workers_seen(), f"{node} back")


def test_the_docs_snippet_runs(grid: LocalGrid, capsys: pytest.CaptureFixture[str]) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "interactive.md").read_text()
    section = doc.split("## Background processes", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    snippet = snippet.replace("from sandgrid.client import Client\n", "")
    exec(snippet, {"Client": lambda: Client(grid.api_url, TOKEN)})
    out = capsys.readouterr().out.split("\n")
    assert {"hello", "15", "0 hi"} <= set(out)
