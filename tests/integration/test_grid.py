"""The whole grid on loopback: ``sandgrid serve`` and two ``sandgrid worker`` nodes.

Needs Redis, Docker with the sandbox image, MinIO (or the local snapshot store)
and the worker glue (``worker.main.run_worker``). Each process logs to a file
under the test's temporary directory; the fixtures stop every process they start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from sandgrid.client import Client
from sandgrid.errors import NotFound
from sandgrid.wire import names

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_API_PORT", "8711"))
API = f"http://127.0.0.1:{PORT}"
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODES = ("grid-w1", "grid-w2")
TOKENS = {"acme": "tok-acme-" + "a" * 24, "globex": "tok-globex-" + "b" * 24}
FLOOD_TOKEN = "tok-flood-" + "c" * 24
FLOOD_TURNS = 3
SANDGRID = [sys.executable, "-m", "sandgrid.cli"]


@dataclass
class GridProcs:
    """The running grid and how to (re)start its parts."""

    tmp: Path
    env: dict[str, str]
    api: subprocess.Popen[bytes] | None = None
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("ab")
        return subprocess.Popen(
            [*SANDGRID, *args], env=self.env, stdout=log, stderr=log, start_new_session=True
        )

    def start_worker(self, node: str) -> None:
        args = ("worker", "--types", "python", "--concurrency", "2", "--node", node)
        self.workers[node] = self.spawn(node, *args)

    def kill_worker(self, node: str) -> None:
        proc = self.workers.pop(node)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        procs = [p for p in [self.api, *self.workers.values()] if p is not None]
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)

    def running(self) -> dict[str, subprocess.Popen[bytes]]:
        """The processes that should be up, by name."""
        return {"api": self.api, **self.workers} if self.api else dict(self.workers)

    def logs(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in self.tmp.glob("*.log"))


def _wait(cond: Any, what: str, procs: GridProcs, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except (httpx.HTTPError, redis.RedisError):
            pass
        dead = [n for n, p in procs.running().items() if p.poll() is not None]
        if dead:
            pytest.fail(f"{', '.join(dead)} exited while waiting for {what}\n{procs.logs()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{procs.logs()}")
        time.sleep(0.2)


def _workers_seen() -> set[str]:
    return set(httpx.get(f"{API}/v1/health", timeout=2).json()["workers"])


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GridProcs]:
    tmp = tmp_path_factory.mktemp("grid")
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    tenants = [{"name": n, "token": t} for n, t in TOKENS.items()]
    tenants.append(
        {"name": "flood", "token": FLOOD_TOKEN, "limits": {"max_concurrent_turns": FLOOD_TURNS}}
    )
    (tmp / "tenants.json").write_text(json.dumps({"tenants": tenants}))
    env = {
        **os.environ,
        "SANDGRID_REDIS_URL": REDIS_URL,
        "SANDGRID_API_URL": API,
        "SANDGRID_TENANTS_FILE": str(tmp / "tenants.json"),
        "SANDGRID_LEASE_TTL_S": "4",
        "SANDGRID_HEARTBEAT_S": "0.5",
        "SANDGRID_WORKER__POOL_SIZE": "1",
        "SANDGRID_WORKER__SNAPSHOT_STORE": os.environ.get("SANDGRID_TEST_SNAPSHOT_STORE", "local"),
        "SANDGRID_WORKER__LOCAL_SNAPSHOT_DIR": str(tmp / "snapshots"),
    }
    procs = GridProcs(tmp, env)
    try:
        procs.api = procs.spawn("api", "serve", "--port", str(PORT))
        for node in NODES:
            procs.start_worker(node)
        _wait(lambda: _workers_seen() >= set(NODES), "both workers in /v1/health", procs)
        yield procs
    finally:
        procs.stop_all()
        r.flushdb()
        r.close()


@pytest.fixture
def acme(grid: GridProcs) -> Iterator[Client]:
    with Client(API, TOKENS["acme"]) as c:
        yield c


def test_turns_go_to_the_owner(acme: Client, grid: GridProcs) -> None:
    with acme.session(type="python") as s:
        first = s.exec(["python3", "-c", "open('n', 'w').write('1'); print('ok')"])
        assert first.exit_code == 0 and first.stdout == "ok\n", first
        owner = first.node
        assert owner in NODES and s.refresh().owner == owner
        for _ in range(5):
            r = s.exec(shell="cat n")
            assert (r.exit_code, r.stdout, r.node) == (0, "1", owner)
            assert {"api_ms", "queue_ms", "worker_ms", "sandbox_ms"} <= set(r.timings)


def test_next_turn_runs_on_the_other_worker_after_the_owner_dies(
    acme: Client, grid: GridProcs
) -> None:
    with acme.session(type="python") as s:
        first = s.exec(shell="echo kept > data.txt && echo written")
        assert first.exit_code == 0, first
        owner = first.node
        other = next(n for n in NODES if n != owner)
        grid.kill_worker(owner)
        r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        _wait(lambda: not r.exists(names.node_key(owner)), f"{owner}'s heartbeat to lapse", grid)
        after = s.exec(shell="cat data.txt")
        assert (after.exit_code, after.stdout, after.node) == (0, "kept\n", other), after
        assert s.refresh().owner == other
    grid.start_worker(owner)
    _wait(lambda: owner in _workers_seen(), f"{owner} back", grid)


def test_other_tenants_get_404(acme: Client, grid: GridProcs) -> None:
    with acme.session() as s, Client(API, TOKENS["globex"]) as globex:
        s.exec(shell="echo secret > s.txt")
        for call in (
            lambda: globex.get_session(s.id),
            lambda: globex.exec(s.id, shell="cat s.txt"),
            lambda: globex.read_file(s.id, "s.txt"),
            lambda: globex.list_files(s.id),
            lambda: globex.download_tar(s.id),
            lambda: globex.close_session(s.id),
        ):
            with pytest.raises(NotFound):
                call()
        assert s.id not in {x.id for x in globex.list_sessions()}
        assert s.read_file("s.txt") == "secret\n"


def test_concurrent_turns_on_one_session_each_run_once(acme: Client, grid: GridProcs) -> None:
    """Six calls at once on one session (issue 20): all are served, none refused, each
    runs exactly once; with parallel turns their lines may interleave."""
    with acme.session() as s:
        statuses: list[int] = []
        barrier = threading.Barrier(6)

        def turn(i: int) -> None:
            cmd = f"echo start-{i} >> log; sleep 0.3; echo end-{i} >> log"
            barrier.wait()
            r = httpx.post(
                f"{API}/v1/sessions/{s.id}/exec",
                json={"shell": cmd},
                headers={"Authorization": f"Bearer {TOKENS['acme']}"},
                timeout=60,
            )
            statuses.append(r.status_code)

        threads = [threading.Thread(target=turn, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == [200] * 6, statuses
        lines = str(s.read_file("log")).split()
        assert sorted(lines) == sorted(
            [f"start-{i}" for i in range(6)] + [f"end-{i}" for i in range(6)]
        )
        for i in range(6):  # each turn's own lines in its own order
            assert lines.index(f"start-{i}") < lines.index(f"end-{i}"), lines


def test_a_flood_gets_429_with_retry_after(grid: GridProcs) -> None:
    headers = {"Authorization": f"Bearer {FLOOD_TOKEN}"}
    with Client(API, FLOOD_TOKEN) as flood:
        sessions = [flood.create_session() for _ in range(4 * FLOOD_TURNS)]
        answers: list[httpx.Response] = []
        barrier = threading.Barrier(len(sessions))

        def turn(sid: str) -> None:
            barrier.wait()
            answers.append(
                httpx.post(
                    f"{API}/v1/sessions/{sid}/exec",
                    json={"shell": "sleep 1"},
                    headers=headers,
                    timeout=60,
                )
            )

        threads = [threading.Thread(target=turn, args=(s.id,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [a.status_code for a in answers]
        assert set(codes) <= {200, 429} and 429 in codes, codes
        for a in answers:
            if a.status_code == 429:
                assert int(a.headers["Retry-After"]) >= 1
                assert a.json()["error"]["code"] in ("tenant_limit", "backpressure")
        for s in sessions:
            flood.close_session(s.id)


def test_one_shot_exec_command(grid: GridProcs) -> None:
    env = {**grid.env, "SANDGRID_TOKEN": TOKENS["acme"]}
    code = "import sys; print('hi'); sys.exit(3)"
    out = subprocess.run(
        [*SANDGRID, "exec", "--type", "python", "--", "python3", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 3 and out.stdout == "hi\n", out.stderr
