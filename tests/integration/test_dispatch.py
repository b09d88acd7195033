"""The scheduler over the real Celery path: API -> Redis broker -> worker -> result.

The worker is a stand-in node (``celery_fake_node``): no Docker, so these tests
check routing, result waiting, latency and worker loss on the scheduler side.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from sandgrid.models import ExecRequest
from sandgrid.ops.exec import ExecOp
from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.jobs import TurnJob
from sandgrid.wire.redis_ledger import RedisLedger
from sandgrid.wire.settings import Settings
from scheduler.api import create_app
from scheduler.registry.nodes import NODES_CACHE_S
from scheduler.registry.sessions import SessionRegistry, new_turn_id
from scheduler.tenants import TenantStore
from scheduler.turns.dispatch import CeleryDispatcher, task_id_of
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded

pytestmark = pytest.mark.integration

#: Where ``celery_fake_node`` (the fake worker app) lives.
HERE = Path(__file__).parents[1] / "support"


def start_fake_node(node: str, settings: Settings) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SANDGRID_REDIS_URL": settings.redis_url,
        "FAKE_NODE": node,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    queues = ",".join([names.node_queue(node), names.type_queue("python")])
    cmd = [sys.executable, "-m", "celery", "-A", "celery_fake_node", "worker"]
    cmd += ["-P", "threads", "-c", "4", "-Q", queues, "-n", f"{node}@%h", "-l", "WARNING"]
    cmd += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    return subprocess.Popen(cmd, cwd=HERE, env=env, start_new_session=True)


def wait_alive(client: redis.Redis[str], node: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not client.exists(names.node_key(node)):
        assert time.monotonic() < deadline, f"fake node {node} never heartbeated"
        time.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture
def node(redis_client: redis.Redis[str], test_settings: Settings) -> Iterator[Any]:
    proc = start_fake_node("fake-a", test_settings)
    try:
        wait_alive(redis_client, "fake-a")
        yield proc
    finally:
        stop(proc)


@pytest.fixture
def api(
    redis_client: redis.Redis[str], test_settings: Settings
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    token = TenantStore(redis_client).add("acme")
    with TestClient(create_app(test_settings)) as http:
        yield http, {"Authorization": f"Bearer {token}"}


def _session(http: TestClient, headers: dict[str, str]) -> str:
    r = http.post("/v1/sessions", json={}, headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_turns_route_to_the_owner_and_are_fast(node: Any, api: Any) -> None:
    http, headers = api
    sid = _session(http, headers)
    first = http.post(f"/v1/sessions/{sid}/exec", json={"shell": "x"}, headers=headers)
    assert first.status_code == 200, first.text
    assert first.json()["stdout"] == "sbx.python" and first.json()["node"] == "fake-a"
    took = []
    for _ in range(60):
        t0 = time.perf_counter()
        r = http.post(f"/v1/sessions/{sid}/exec", json={"shell": "x"}, headers=headers)
        took.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200 and r.json()["stdout"] == "node.fake-a"
    p50 = statistics.median(took)
    timings = r.json()["timings"]
    print(f"\nwarm turn through Celery: p50 {p50:.1f} ms, last timings {timings}")
    assert p50 < 50, f"p50 {p50:.1f} ms"
    assert http.get(f"/v1/sessions/{sid}", headers=headers).json()["turns"] == 61


def test_worker_killed_mid_turn_runs_again_on_another_node(
    node: Any, api: Any, redis_client: redis.Redis[str], test_settings: Settings
) -> None:
    """The API notices the dead heartbeat and sends attempt 2 to the shared queue."""
    http, headers = api
    sid = _session(http, headers)
    answers: list[Any] = []
    t = threading.Thread(
        target=lambda: answers.append(
            http.post(f"/v1/sessions/{sid}/exec", json={"shell": "hang"}, headers=headers)
        )
    )
    t.start()
    deadline = time.monotonic() + 10
    while redis_client.get(names.lease_key(sid)) != "fake-a":
        assert time.monotonic() < deadline, "the fake node never took the turn"
        time.sleep(0.02)
    stop(node)
    other = start_fake_node("fake-b", test_settings)
    try:
        t.join(30)
    finally:
        stop(other)
    assert answers, "no answer after the worker died"
    r = answers[0]
    assert r.status_code == 200, r.text
    assert r.json()["node"] == "fake-b" and r.json()["stdout"] == "sbx.python"


def test_no_worker_taking_it_is_turn_timeout(
    api: Any, test_settings: Settings, redis_client: redis.Redis[str]
) -> None:
    http, headers = api
    refused = http.post("/v1/sessions", json={}, headers=headers)  # nobody serves python
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_capacity"
    # A node that beats for the type but consumes nothing: the turn waits, then times out.
    RedisLedger(redis_client).heartbeat("mute", 30, incarnation="m", types=["python"])
    time.sleep(NODES_CACHE_S)  # the API's view of the nodes is that old at most
    sid = _session(http, headers)
    http.app.state.services.runner.turn_margin_s = 0.3  # type: ignore[attr-defined]
    r = http.post(
        f"/v1/sessions/{sid}/exec", json={"shell": "x", "timeout_s": 0.2}, headers=headers
    )
    assert r.status_code == 503 and r.json()["error"]["code"] == "turn_timeout"


def test_results_come_on_one_subscription_and_wait_for_the_waiter(
    node: Any, api: Any, redis_client: redis.Redis[str], test_settings: Settings
) -> None:
    """22.1: the API thread subscribes to its reply channel once, not once per turn
    (a SUBSCRIBE and an UNSUBSCRIBE each), and a result the worker published while
    the sender was between its send and its wait is delivered by the subscription
    (a wait on a turn this thread sent does not read the key first)."""
    http, headers = api
    sid = _session(http, headers)
    session = SessionRegistry(redis_client).get("acme", sid)
    dispatcher = CeleryDispatcher(make_celery(test_settings))

    def send() -> tuple[TurnJob, Any]:
        op = ExecOp(request=ExecRequest(shell="x"))
        job = TurnJob(turn_id=new_turn_id(), session=session, op=op)
        return job, dispatcher.send(job, names.node_queue("fake-a"), expires=30)

    _, first = send()
    assert dispatcher.wait(first, 10) is not None  # subscribed, connections up
    with recorded(TEST_REDIS_URL) as seen:
        for _ in range(5):
            job, handle = send()
            key = f"celery-task-meta-{task_id_of(job)}"
            deadline = time.monotonic() + 10
            while not redis_client.exists(key):  # published before anyone waits
                assert time.monotonic() < deadline, "the fake node never answered"
                time.sleep(0.01)
            t0 = time.monotonic()
            outcome = dispatcher.wait(handle, 5)
            assert outcome is not None and outcome.ok and outcome.turn_id == job.turn_id
            assert time.monotonic() - t0 < 1
    sent = names_of(seen)
    assert "SUBSCRIBE" not in sent and "UNSUBSCRIBE" not in sent, sent
