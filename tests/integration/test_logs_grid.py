"""Tenant data never reaches a log or Flower, on runc and on runsc (issue 23, items 4 and 5).

A grid of its own (the API with its access log on, one worker serving
``python`` and ``python-gvisor``, and Flower as ``deploy/local/grid.sh`` starts
it) runs real turns whose stdin, written file, session env, request env and
stdout each carry a marker, plus a request and a WebSocket with a secret in
the query string. Then the API's, the worker's and Flower's logs, Flower's
``/api/tasks``, each task's ``/api/task/info`` and ``/api/workers`` (Celery's
inspect answers, read while a turn is running) must not hold the marker; and
every log line is one JSON object. The commands never spell the markers out:
stdout's is built by the sandbox, so a marker found anywhere came from data.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from websockets.sync.client import connect

from sandgrid.localgrid import LocalGrid
from tests.support.grid_fixtures import FLOWER_PASSWORD, FLOWER_USER, start_flower

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_LOGS_API_PORT", "8763"))
FLOWER_PORT = int(os.environ.get("SANDGRID_TEST_LOGS_FLOWER_PORT", "5593"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODE = "logs-w1"
TYPES = "python,python-gvisor"
TOKEN = "tok-logs-" + "g" * 24
FLOWER_AUTH = (FLOWER_USER, FLOWER_PASSWORD)
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]
#: Unique to this run: found in a log or in Flower, it can only come from the turns' data.
MARK = uuid.uuid4().hex[:16]


GRID_ENV = {
    "SANDGRID_WORKER__POOL_SIZE": "1",
    "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
    "SANDGRID_WORKER__METRICS_PORT": "0",
    "SANDGRID_WORKER__METRICS_ADDR": "127.0.0.1",
    # Beats far apart enough that a node slowed down by a loaded host (runsc is
    # CPU-heavy) is not taken for lost while its turn sleeps: liveness is not tested here.
    "SANDGRID_HEARTBEAT_S": "2",
    "SANDGRID_LEASE_TTL_S": "15",
}


def _empty_db() -> redis.Redis[str]:
    """The test's Redis database, emptied; the module is skipped without Redis."""
    client: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    client.flushdb()
    return client


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    """Flower first (it sees every event), the API with its access log, one worker with
    its task lines."""
    work = tmp_path_factory.mktemp("logsgrid")
    db = _empty_db()
    env = {
        **GRID_ENV,
        "SANDGRID_WORKER__EGRESS__STATE_DIR": str(work / "egress"),
        "SANDGRID_WORKER__TASK_LOG": "true",  # Celery's line per turn, checked below
    }
    g = LocalGrid(work / "grid", port=PORT, redis_url=REDIS_URL, tenants={"logs": TOKEN}, env=env)
    try:
        start_flower(g, FLOWER_PORT)
        g.spawn("api", "serve", "--host", "127.0.0.1", "--port", str(PORT), "--access-log")
        g.start_worker(NODE, types=TYPES, concurrency=2)
        g.wait(lambda: NODE in g.workers_seen(), "the worker in /v1/health")
        yield g
    finally:
        g.stop()
        db.flushdb()
        db.close()


def call(
    g: LocalGrid, method: str, route: str, body: Any = None, params: dict[str, str] | None = None
) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    resp = httpx.request(
        method, f"{g.api_url}{route}", json=body, params=params, headers=headers, timeout=120
    )
    assert resp.status_code < 300, resp.text
    return resp.json()


def flower(path: str) -> str:
    resp = httpx.get(f"http://127.0.0.1:{FLOWER_PORT}{path}", auth=FLOWER_AUTH, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.text


def _turns(g: LocalGrid, kind: str) -> str:
    """Real turns whose data carry the marker; returns the session id."""
    sid = call(g, "POST", "/v1/sessions", {"type": kind, "env": {"SG_ENV": f"{MARK}-env"}})["id"]
    call(
        g,
        "POST",
        f"/v1/sessions/{sid}/files",
        {"files": [{"path": "in.txt", "content": f"{MARK}-file"}]},
    )
    read = call(g, "GET", f"/v1/sessions/{sid}/files", params={"path": "in.txt"})
    assert read["content"] == f"{MARK}-file"
    reversed_mark = f"{MARK}-stdout"[::-1]
    command = (
        f'cat in.txt; cat; echo "$SG_ENV $SG_REQ"; python3 -c "print(\'{reversed_mark}\'[::-1])"'
    )
    assert MARK not in command
    body = {"shell": command, "stdin": f"{MARK}-stdin", "env": {"SG_REQ": f"{MARK}-reqenv"}}
    out = call(g, "POST", f"/v1/sessions/{sid}/exec", body)
    for part in ("file", "stdin", "env", "reqenv", "stdout"):
        assert f"{MARK}-{part}" in out["stdout"], out  # the turn really carried each one
    call(g, "GET", "/v1/sessions", params={"token": f"{MARK}-query"})  # a secret in a query string
    ws = f"ws://127.0.0.1:{PORT}/v1/sessions/{sid}/pty?token={MARK}-ws"
    try:
        with connect(ws, open_timeout=10) as sock:
            sock.recv(timeout=10)
    except Exception:  # refused either way (a bad token): only its log line matters here
        pass
    return sid


def _inspect_while_running(g: LocalGrid, sid: str) -> list[str]:
    """Flower's ``/api/workers`` for the node (Celery's inspect answers, ``active`` and
    ``reserved`` included: Flower asks for them when a worker is named) while a turn runs.

    Flower asks ``active`` with ``safe=True``; ``reserved``, ``scheduled`` and
    ``query_task`` give the raw arguments unless the request class says otherwise
    (``SafeRequest``, tests/unit/worker/turns/test_task_repr.py).
    """
    body = {"shell": "sleep 8; cat", "stdin": f"{MARK}-running", "env": {"SG_RUN": f"{MARK}-r"}}
    done = threading.Thread(target=call, args=(g, "POST", f"/v1/sessions/{sid}/exec", body))
    done.start()
    (worker,) = json.loads(flower("/api/workers?refresh=1"))
    seen, held = [], False
    deadline = time.monotonic() + 8
    while not held and time.monotonic() < deadline:
        text = flower(f"/api/workers?refresh=1&workername={worker}")
        seen.append(text)
        info = json.loads(text).get(worker, {})
        held = bool(info.get("active") or info.get("reserved"))
        time.sleep(0.2)
    done.join(60)
    keys = sorted(json.loads(seen[-1]).get(worker, {}))
    assert held, f"no running turn in Flower's inspect answers ({len(seen)} asked): {keys}"
    return seen


def _flower_tasks(min_count: int) -> tuple[str, dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        text = flower("/api/tasks")
        tasks = json.loads(text)
        done = [t for t in tasks.values() if t.get("state") == "SUCCESS"]
        if len(done) >= min_count or time.monotonic() > deadline:
            return text, tasks
        time.sleep(0.5)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    bad = [x for x in lines if not x.startswith("{")]
    assert not bad, f"{path.name}: lines that are not JSON records: {bad[:5]}"
    return [json.loads(x) for x in lines]


def _leaks(sources: dict[str, str]) -> dict[str, list[str]]:
    """Where the marker is, with what stands around it: every place, not the first."""
    found: dict[str, list[str]] = {}
    for name, text in sources.items():
        at = [i for i in range(len(text)) if text.startswith(MARK, i)][:3]
        if at:
            found[name] = [text[max(0, i - 160) : i + 40] for i in at]
    return found


@pytest.mark.parametrize("kind", RUNTIMES)
def test_no_tenant_data_in_logs_or_flower(grid: LocalGrid, kind: str) -> None:
    sid = _turns(grid, kind)
    sources = {
        f"flower /api/workers #{i}": t for i, t in enumerate(_inspect_while_running(grid, sid))
    }
    text, tasks = _flower_tasks(min_count=4)
    sources["flower /api/tasks"] = text
    turns = [tid for tid, t in tasks.items() if t.get("name") == "sandgrid.turn"]
    assert len(turns) >= 4, text[:2000]
    for tid in turns:
        sources[f"flower /api/task/info/{tid}"] = flower(f"/api/task/info/{tid}")
    time.sleep(1)  # the last lines reach the files
    for name in ("api", NODE, "flower"):
        sources[f"{name}.log"] = (grid.workdir / f"{name}.log").read_text(errors="replace")
    leaks = _leaks(sources)
    assert not leaks, f"the marker is in {sorted(leaks)}: {json.dumps(leaks, indent=1)[:6000]}"
    for name in ("api", NODE, "flower"):
        _json_lines(grid.workdir / f"{name}.log")
    succeeded = [t for t in tasks.values() if t.get("state") == "SUCCESS"]
    assert any("result=exec" in str(t.get("result")) for t in succeeded), text[:2000]
    assert any("op=exec" in str(t.get("args")) for t in tasks.values()), text[:2000]
    api = [r["msg"] for r in _json_lines(grid.workdir / "api.log")]
    assert any('"GET /v1/sessions HTTP/1.1" 200' in m for m in api), api[-20:]
    assert any("/pty" in m and "WebSocket" in m for m in api), api[-20:]
    worker = _json_lines(grid.workdir / f"{NODE}.log")
    success = [
        r["msg"] for r in worker if r["logger"] == "celery.app.trace" and "succeeded" in r["msg"]
    ]
    assert any("result=exec" in m and "bytes)" in m for m in success), success[-5:]
