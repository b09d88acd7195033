"""25.1 / 25.5: sandbox types are data, added and removed on a live grid with no restart.

A grid of its own (the API and one worker node selecting ``python*`` types by
pattern). A type added by ``POST /v1/types`` (a new name for the shipped Python
image, with its own default quota and a warm pool of one) is served by the
running node within a poll, on runc and on runsc: its heartbeat lists it, a
session of it runs there with the type's quota, and the node's process is the
one that started. A private type is invisible (404) to another tenant. A
type in use cannot be removed (409 with the count); after its session closes
it can, the node stops serving it and drains its pool, and a session of it is
404. The catalog's record in the object store brings the added types back
after Redis loses them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import pytest
import redis

from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_TYPES_API_PORT", "8751"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODE = "types-w1"
ACME = "tok-acme-" + "a" * 24
GLOBEX = "tok-globex-" + "b" * 24
ADMIN = "tok-admin-" + "c" * 24
IMAGE = "sandgrid/sandbox-python:latest"
RUNTIMES = [
    pytest.param("runc", id="runc"),
    pytest.param("runsc", id="runsc", marks=pytest.mark.runsc),
]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    work = tmp_path_factory.mktemp("typesgrid")
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    (work / "admin-token").write_text(ADMIN + "\n")
    g = LocalGrid(
        work / "grid",
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"acme": ACME, "globex": GLOBEX},
        env={
            "SANDGRID_ADMIN_TOKEN_FILE": str(work / "admin-token"),
            "SANDGRID_WORKER__POOL_SIZE": "0",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_HEARTBEAT_S": "0.5",
            "SANDGRID_TYPES_POLL_S": "0.5",
        },
    )
    try:
        g.start([NODE], types="python,python-*", concurrency=2)
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


def call(method: str, path: str, token: str, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    url = f"http://127.0.0.1:{PORT}{path}"
    return httpx.request(method, url, json=body, headers=headers, timeout=60)


def node_types() -> list[str]:
    headers = {"Authorization": f"Bearer {ADMIN}"}  # private types are the operator's to see
    r = httpx.get(f"http://127.0.0.1:{PORT}/v1/nodes", headers=headers, timeout=10)
    found = r.json()["nodes"]
    return next((n["types"] for n in found if n["name"] == NODE), [])


def warm(kind: str) -> int:
    """Warm (no session's) containers of type ``kind`` on the engine."""
    client = docker.from_env()
    try:
        found = client.containers.list(filters={"label": [f"sandgrid.type={kind}"]})
        return sum(1 for c in found if not c.labels.get("sandgrid.session"))
    finally:
        client.close()


def until(cond: Any, what: str, grid: LocalGrid, timeout: float = 60) -> None:
    grid.wait(cond, what, timeout=timeout)


def test_the_shipped_types_are_seeded_from_the_types_file(grid: LocalGrid) -> None:
    listed = call("GET", "/v1/types", ACME).json()["types"]
    by_name = {t["name"]: t for t in listed}
    assert {"python", "python-gvisor", "bfcl", "appworld"} <= set(by_name)
    assert by_name["python"]["runtime"] == "runc" and by_name["python"]["image"] == IMAGE
    assert by_name["python"]["digest"].startswith("sha256:")  # resolved from the engine
    assert by_name["python"]["source"] == "file"
    assert NODE in by_name["python"]["nodes"]


def test_adding_and_removing_a_type_needs_an_operators_token(grid: LocalGrid) -> None:
    body = {"name": "python-nope", "image": IMAGE, "runtime": "runc"}
    assert call("POST", "/v1/types", ACME, body).status_code == 401
    assert call("DELETE", "/v1/types/python", ACME).status_code == 401
    bad = call("POST", "/v1/types", ADMIN, {**body, "runtime": "kata"})
    assert bad.status_code == 422 and "runtime" in bad.text
    missing = call("POST", "/v1/types", ADMIN, {**body, "image": "sandgrid/none:latest"})
    assert missing.status_code == 422 and missing.json()["error"]["context"]["field"] == "image"
    clash = call("POST", "/v1/types", ADMIN, {**body, "name": "python"})
    assert clash.status_code == 422 and clash.json()["error"]["context"]["field"] == "name"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_type_added_by_api_runs_on_the_live_node_and_is_removed_after_use(
    grid: LocalGrid, runtime: str
) -> None:
    kind = f"python-small-{runtime}"
    pid = grid.procs[NODE].pid
    body = {
        "name": kind,
        "image": IMAGE,
        "runtime": runtime,
        "quotas": {"memory_mb": 256},
        "pool_size": 1,
    }
    added = call("POST", "/v1/types", ADMIN, body)
    assert added.status_code == 201, added.text
    assert added.json()["digest"].startswith("sha256:") and added.json()["source"] == "api"
    until(lambda: kind in node_types(), f"the node's heartbeat naming {kind}", grid)
    until(lambda: warm(kind) == 1, f"a warm {kind} sandbox (its pool of one)", grid)

    made = call("POST", "/v1/sessions", ACME, {"type": kind})
    assert made.status_code == 201, made.text
    session = made.json()
    assert session["quotas"]["memory_mb"] == 256  # the type's default quota
    ran = call("POST", f"/v1/sessions/{session['id']}/exec", ACME, {"shell": "echo ok"})
    assert ran.status_code == 200, ran.text
    assert ran.json()["stdout"] == "ok\n" and ran.json()["node"] == NODE

    refused = call("DELETE", f"/v1/types/{kind}", ADMIN)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "type_in_use" and error["context"]["sessions"] == 1
    assert call("DELETE", f"/v1/sessions/{session['id']}", ACME).status_code == 200
    removed = call("DELETE", f"/v1/types/{kind}", ADMIN)
    assert removed.status_code == 200, removed.text

    assert call("GET", f"/v1/types/{kind}", ACME).status_code == 404
    gone = call("POST", "/v1/sessions", ACME, {"type": kind})
    assert gone.status_code == 404 and gone.json()["error"]["context"]["field"] == "type"
    until(lambda: kind not in node_types(), f"the heartbeat dropping {kind}", grid)
    until(lambda: warm(kind) == 0, f"the {kind} pool drained", grid)
    assert grid.procs[NODE].poll() is None and grid.procs[NODE].pid == pid  # never restarted


def test_a_private_type_is_invisible_to_another_tenant(grid: LocalGrid) -> None:
    body = {"name": "python-acme", "image": IMAGE, "runtime": "runc", "tenant": "acme"}
    assert call("POST", "/v1/types", ADMIN, body).status_code == 201
    try:
        until(lambda: "python-acme" in node_types(), "the node serving python-acme", grid)
        mine = [t["name"] for t in call("GET", "/v1/types", ACME).json()["types"]]
        theirs = [t["name"] for t in call("GET", "/v1/types", GLOBEX).json()["types"]]
        assert "python-acme" in mine and "python-acme" not in theirs
        assert call("GET", "/v1/types/python-acme", GLOBEX).status_code == 404
        unknown = call("POST", "/v1/sessions", GLOBEX, {"type": "python-nosuch"})
        probe = call("POST", "/v1/sessions", GLOBEX, {"type": "python-acme"})
        assert probe.status_code == unknown.status_code == 404
        assert probe.json()["error"]["context"]["field"] == "type"
        made = call("POST", "/v1/sessions", ACME, {"type": "python-acme"})
        assert made.status_code == 201, made.text
        assert call("DELETE", f"/v1/sessions/{made.json()['id']}", ACME).status_code == 200
    finally:
        call("DELETE", "/v1/types/python-acme", ADMIN)


def test_types_added_by_api_survive_a_redis_that_lost_the_catalog(grid: LocalGrid) -> None:
    body = {"name": "python-kept", "image": IMAGE, "runtime": "runc"}
    assert call("POST", "/v1/types", ADMIN, body).status_code == 201
    try:
        r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
        r.delete(names.types_key(), names.types_version_key())  # as a Redis that lost its data
        r.close()
        time.sleep(1.0)  # the API's view looks at the version again
        kept = call("GET", "/v1/types/python-kept", ACME)
        assert kept.status_code == 200, kept.text
        listed = {t["name"] for t in call("GET", "/v1/types", ACME).json()["types"]}
        assert {"python", "python-gvisor", "python-kept"} <= listed
    finally:
        call("DELETE", "/v1/types/python-kept", ADMIN)
