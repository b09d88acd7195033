"""The file API's confinement through a real grid, on runc and on runsc (issue 23.11).

Sandbox code makes ``/workspace/out -> /tmp/outside`` (and a relative
``/workspace/rel_out -> ../tmp/outside``) with ``ln -s``; then every file route,
the grid's own (``/v1/sessions/{id}/files``, ``/files/list``, ``/tar``) and
AgentScope's (``/proxy/{id}/workspace/...``: exists, list, mkdir, move, entry),
is asked to go through the link. Each answers 422 ``path_outside_workspace``
naming the path, and nothing in ``/tmp/outside`` changes; a link that stays
inside the workspace still works for every op. Both of the agent's ways to
resolve run on both runtimes (this machine's kernel and gVisor both have
``openat2``): ``RESOLVE_BENEATH`` answers ``EXDEV`` for the links out, and the
per-component walk then decides (refuses); ``in/...`` is opened by ``openat2``;
``in`` itself, a last component to follow, by the walk. Where gVisor has no
``openat2`` (older releases answer ``ENOSYS``) the walk does it all, as the unit
tests check (tests/unit/worker/agent/test_beneath.py, each case both ways).
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from sandgrid.localgrid import LocalGrid

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_CONFINE_API_PORT", "8723"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-confine-" + "c" * 24
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]
SETUP = (
    "mkdir -p /tmp/outside /workspace/sub && echo secret > /tmp/outside/secret"
    " && echo inside > /workspace/sub/f.txt && ln -s /tmp/outside /workspace/out"
    " && ln -s ../tmp/outside /workspace/rel_out && ln -s sub /workspace/in"
)
OUTSIDE = "cd /tmp/outside && find . | sort && cat secret"


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    g = LocalGrid(
        tmp_path_factory.mktemp("confinegrid"),
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"confine": TOKEN},
        env={"SANDGRID_WORKER__POOL_SIZE": "1", "SANDGRID_WORKER__SNAPSHOT_STORE": "local"},
    )
    try:
        g.start(["confine-w1"], types="python,python-gvisor", concurrency=2)
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


def call(g: LocalGrid, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}", **kw.pop("headers", {})}
    return httpx.request(method, f"{g.api_url}{path}", headers=headers, timeout=120, **kw)


def ok(resp: httpx.Response) -> Any:
    assert resp.status_code < 300, resp.text
    return resp.json() if resp.content and "json" in resp.headers["content-type"] else None


def sh(g: LocalGrid, sid: str, command: str) -> str:
    out = ok(call(g, "POST", f"/v1/sessions/{sid}/exec", json={"shell": command}))
    assert out["exit_code"] == 0, out
    return str(out["stdout"])


def _tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("planted.txt")
        info.size = 5
        t.addfile(info, io.BytesIO(b"pwned"))
    return buf.getvalue()


def attempts(sid: str, link: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every file route through ``link``: (method, path, request kwargs)."""
    s, p = f"/v1/sessions/{sid}", f"/proxy/{sid}/workspace"
    write = {"files": [{"path": f"{link}/planted", "content": "pwned"}]}
    tar = {"content": _tar(), "headers": {"Content-Type": "application/x-tar"}}
    return [
        ("GET", f"{s}/files", {"params": {"path": f"{link}/secret"}}),
        ("POST", f"{s}/files", {"json": write}),
        ("GET", f"{s}/files/list", {"params": {"path": link}}),
        ("GET", f"{s}/files/list", {"params": {"path": f"{link}/secret"}}),
        ("DELETE", f"{s}/files", {"params": {"path": f"{link}/secret"}}),
        ("PUT", f"{s}/tar", {"params": {"path": link}, **tar}),
        ("PUT", f"{s}/tar", {"params": {"path": f"{link}/new"}, **tar}),
        ("GET", f"{s}/tar", {"params": {"path": link}}),
        ("GET", f"{p}/file", {"params": {"path": f"{link}/secret"}}),
        ("PUT", f"{p}/file", {"params": {"path": f"{link}/planted"}, "content": b"pwned"}),
        ("GET", f"{p}/exists", {"params": {"path": f"{link}/secret"}}),
        ("GET", f"{p}/list", {"params": {"path": link}}),
        ("POST", f"{p}/mkdir", {"json": {"path": f"{link}/made"}}),
        ("POST", f"{p}/move", {"json": {"source": f"{link}/secret", "destination": "stolen"}}),
        ("POST", f"{p}/move", {"json": {"source": "sub/f.txt", "destination": f"{link}/put"}}),
        ("DELETE", f"{p}/entry", {"params": {"path": f"{link}/secret"}}),
    ]


@pytest.fixture(scope="module", params=RUNTIMES)
def linked(request: pytest.FixtureRequest, grid: LocalGrid) -> str:
    """A session whose workspace holds links out (``out``, ``rel_out``) and one in (``in``)."""
    sid = str(ok(call(grid, "POST", "/v1/sessions", json={"type": request.param}))["id"])
    sh(grid, sid, SETUP)
    return sid


@pytest.mark.parametrize("link", ["out", "rel_out"])
def test_every_file_route_through_a_link_out_is_refused(
    grid: LocalGrid, linked: str, link: str
) -> None:
    for method, path, kw in attempts(linked, link):
        resp = call(grid, method, path, **dict(kw))
        where = f"{method} {path} {kw.get('params') or kw.get('json') or ''}"
        assert resp.status_code == 422, f"{where}: {resp.status_code} {resp.text}"
        error = resp.json()["error"]
        assert error["code"] == "path_outside_workspace", f"{where}: {error}"
        assert link in error["message"] and "symlink out of /workspace" in error["message"]
    assert sh(grid, linked, OUTSIDE).split() == [".", "./secret", "secret"]
    assert sh(grid, linked, "cat /workspace/sub/f.txt").strip() == "inside"
    assert "stolen" not in sh(grid, linked, "ls /workspace")


def test_a_link_inside_the_workspace_works_for_every_op(grid: LocalGrid, linked: str) -> None:
    s, p = f"/v1/sessions/{linked}", f"/proxy/{linked}/workspace"
    read = ok(call(grid, "GET", f"{s}/files", params={"path": "in/f.txt"}))
    assert read["content"] == "inside\n"
    ok(call(grid, "POST", f"{s}/files", json={"files": [{"path": "in/w.txt", "content": "w"}]}))
    listed = ok(call(grid, "GET", f"{s}/files/list", params={"path": "in"}))
    assert {e["path"] for e in listed["entries"]} == {"in/f.txt", "in/w.txt"}
    assert ok(call(grid, "POST", f"{p}/mkdir", json={"path": "in/d"})) == {"created": True}
    body = {"source": "in/w.txt", "destination": "in/d/w"}
    moved = ok(call(grid, "POST", f"{p}/move", json=body))
    assert moved["path"] == "/workspace/in/d/w" and moved["type"] == "file"
    assert ok(call(grid, "GET", f"{p}/exists", params={"path": "in/d/w"})) == {"exists": True}
    assert ok(call(grid, "GET", f"{p}/exists", params={"path": "in/none"})) == {"exists": False}
    tar = {"content": _tar(), "headers": {"Content-Type": "application/x-tar"}}
    assert ok(call(grid, "PUT", f"{s}/tar", params={"path": "in/t"}, **tar)) == {"files": 1}
    got = call(grid, "GET", f"{s}/tar", params={"path": "in"})
    with tarfile.open(fileobj=io.BytesIO(got.content)) as t:
        assert {"f.txt", "d/w", "t/planted.txt"} <= set(t.getnames())
    gone = ok(call(grid, "DELETE", f"{s}/files", params={"path": "in/d", "recursive": "true"}))
    assert gone == {"deleted": 2}
    assert sh(grid, linked, "cd /workspace/sub && find . | sort").split() == [
        ".",
        "./f.txt",
        "./t",
        "./t/planted.txt",
    ]


def test_the_link_out_itself_is_data(grid: LocalGrid, linked: str) -> None:
    """Listed and deleted as a link: the directory it points to stays."""
    s = f"/v1/sessions/{linked}"
    listed = ok(call(grid, "GET", f"{s}/files/list", params={"path": "."}))
    kinds = {e["path"]: e["type"] for e in listed["entries"]}
    assert kinds["out"] == "symlink" and kinds["rel_out"] == "symlink"
    assert ok(call(grid, "DELETE", f"{s}/files", params={"path": "rel_out"})) == {"deleted": 1}
    assert sh(grid, linked, OUTSIDE).split() == [".", "./secret", "secret"]
