"""The HTTP API end to end in-process: real Redis, a fake worker instead of Celery."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sandgrid.errors import (
    AuthError,
    Conflict,
    ErrorCode,
    InfrastructureError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    SandboxLost,
)
from sandgrid.wire import names
from tests.support.fakes import Grid


def _session(grid: Grid, token: str | None = None, **body: Any) -> dict[str, Any]:
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers(token))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _exec(grid: Grid, sid: str, body: dict[str, Any], token: str | None = None) -> Any:
    return grid.http.post(f"/v1/sessions/{sid}/exec", json=body, headers=grid.headers(token))


def test_create_get_list(grid: Grid) -> None:
    s = _session(grid, type="python", labels={"run": "1"})
    assert s["id"].startswith("s-") and s["tenant"] == "acme" and s["state"] == "new"
    got = grid.http.get(f"/v1/sessions/{s['id']}", headers=grid.headers()).json()
    assert got["id"] == s["id"] and got["labels"] == {"run": "1"}
    listed = grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"]
    assert [x["id"] for x in listed] == [s["id"]]
    theirs = grid.http.get("/v1/sessions", headers=grid.headers(grid.token_b)).json()
    assert theirs["sessions"] == []


def test_other_tenant_gets_the_same_404_as_unknown(grid: Grid) -> None:
    s = _session(grid)
    theirs = grid.http.get(f"/v1/sessions/{s['id']}", headers=grid.headers(grid.token_b))
    unknown = grid.http.get("/v1/sessions/s-" + "x" * 32, headers=grid.headers(grid.token_b))
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.json()["error"]["code"] == "not_found"
    assert _exec(grid, s["id"], {"shell": "id"}, grid.token_b).status_code == 404
    assert grid.worker.sent == []


def test_exec_routes_to_shared_then_to_owner(grid: Grid) -> None:
    s = _session(grid)
    first = _exec(grid, s["id"], {"argv": ["echo", "hi"]})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["exit_code"] == 0 and body["stdout"] == "echo hi\n" and body["node"] == "fake-1"
    assert {"api_ms", "queue_ms", "worker_ms", "sandbox_ms", "total_ms"} <= set(body["timings"])
    assert _exec(grid, s["id"], {"python": "print(1)"}).status_code == 200
    queues = [q for _, q in grid.worker.sent]
    assert queues == [names.type_queue("python"), names.node_queue("fake-1")]
    info = grid.http.get(f"/v1/sessions/{s['id']}", headers=grid.headers()).json()
    assert info["owner"] == "fake-1" and info["state"] == "live" and info["turns"] == 2


def test_nonzero_exit_is_a_result(grid: Grid) -> None:
    s = _session(grid)
    r = _exec(grid, s["id"], {"argv": ["false"]})
    assert r.status_code == 200 and r.json()["exit_code"] == 3


def test_worker_error_body_maps_to_its_class(grid: Grid) -> None:
    s = _session(grid)
    r = _exec(grid, s["id"], {"argv": ["crash"]})
    assert r.status_code == 500 and r.json()["error"]["code"] == "sandbox_lost"
    with grid.client() as c, pytest.raises(SandboxLost):
        c.exec(s["id"], ["crash"])


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"argv": ["a"], "shell": "b"}, "body", "invalid_input"),
        ({"shell": "x", "timeout_s": -1}, "timeout_s", "invalid_input"),
        ({"shell": "x", "cwd": "../etc"}, "cwd", "path_outside_workspace"),
        ({"shell": "x", "env": {"1BAD": "v"}}, "env", "invalid_input"),
        ({"shell": "x", "bogus": 1}, "bogus", "invalid_input"),
    ],
)
def test_bad_exec_input_is_422_naming_field(
    grid: Grid, body: dict[str, Any], field: str, code: str
) -> None:
    s = _session(grid)
    r = _exec(grid, s["id"], body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["type"] == "InvalidInput"
    assert err["context"]["field"] == field and err["context"]["rule"]
    assert grid.worker.sent == []


def test_bad_session_spec_names_field_and_rule(grid: Grid) -> None:
    r = grid.http.post("/v1/sessions", json={"quotas": {"cpus": 0}}, headers=grid.headers())
    err = r.json()["error"]
    assert r.status_code == 422 and err["context"]["field"] == "quotas.cpus"
    assert "greater than 0.05" in err["context"]["rule"]


@pytest.mark.parametrize(
    "content", ["\u00ddA==", "abc", "ab$d"], ids=["non_ascii", "length", "char"]
)
def test_files_that_are_not_base64_are_refused_before_any_turn(grid: Grid, content: str) -> None:
    """Said to be base64, content must decode: a 422 naming the file, and no session made."""
    body = {"files": [{"path": "a.bin", "content": content, "encoding": "base64"}]}
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    err = r.json()["error"]
    assert r.status_code == 422, r.text
    assert err["context"]["field"] == "files.0" and "not valid base64" in err["context"]["rule"]
    assert grid.worker.sent == []
    assert grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"] == []


def test_unknown_type_is_404(grid: Grid) -> None:
    """An unknown type answers as another tenant's private type does (25.5): 404, naming it."""
    r = grid.http.post("/v1/sessions", json={"type": "cobol"}, headers=grid.headers())
    assert r.status_code == 404 and r.json()["error"]["context"]["field"] == "type"
    assert "python" in r.json()["error"]["message"]


def test_malformed_json_is_422(grid: Grid) -> None:
    r = grid.http.post(
        "/v1/sessions",
        content=b"{not json",
        headers={**grid.headers(), "Content-Type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"


def test_file_path_outside_workspace(grid: Grid) -> None:
    s = _session(grid)
    r = grid.http.get(
        f"/v1/sessions/{s['id']}/files", params={"path": "/etc/passwd"}, headers=grid.headers()
    )
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "path_outside_workspace"
    assert r.json()["error"]["context"]["field"] == "path"


def test_auth_required(grid: Grid) -> None:
    r = grid.http.get("/v1/sessions")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert r.headers["WWW-Authenticate"] == "Bearer"
    bad = grid.http.get("/v1/sessions", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    with grid.client("nope") as c, pytest.raises(AuthError):
        c.list_sessions()


def test_auth_comes_before_validation(grid: Grid) -> None:
    r = grid.http.post("/v1/sessions", json={"quotas": {"cpus": 0}})
    assert r.status_code == 401


def test_payload_too_large(grid: Grid) -> None:
    s = _session(grid)
    limit = grid.services.settings.max_body_bytes
    big = {"files": [{"path": "a", "content": "x" * (limit + 10)}]}
    r = grid.http.post(f"/v1/sessions/{s['id']}/files", json=big, headers=grid.headers())
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "payload_too_large"
    assert r.json()["error"]["type"] == "InvalidInput"


class _HeldCalls:
    """``n`` execs on one session sent at once while the fake worker holds every turn."""

    def __init__(self, grid: Grid, sid: str, n: int) -> None:
        self.grid = grid
        self.answers: list[Any] = []
        grid.worker.hold = threading.Event()
        self.threads = [
            threading.Thread(target=lambda: self.answers.append(_exec(grid, sid, {"shell": "x"})))
            for _ in range(n)
        ]
        for t in self.threads:
            t.start()

    def release(self) -> list[int]:
        """Let the worker answer; the status codes, in the order they came."""
        assert self.grid.worker.hold is not None
        self.grid.worker.hold.set()
        for t in self.threads:
            t.join(10)
        return [a.status_code for a in self.answers]


def test_turns_of_one_session_run_at_once(grid: Grid) -> None:
    s = _session(grid)
    assert _exec(grid, s["id"], {"shell": "x"}).status_code == 200  # live on the fake node
    calls = _HeldCalls(grid, s["id"], 3)
    _wait_for(lambda: len(grid.worker.sent) == 4)  # all three sent before any answered
    assert calls.release() == [200, 200, 200]


def test_calls_to_a_session_not_live_wait_for_the_one_that_brings_it(grid: Grid) -> None:
    """With no live owner the first call goes to the type's shared queue; the others wait
    until a worker holds the session, then go to that worker: one restore for all."""
    s = _session(grid)
    calls = _HeldCalls(grid, s["id"], 2)
    _wait_for(lambda: len(grid.worker.sent) == 1)
    time.sleep(0.1)
    assert [q for _, q in grid.worker.sent] == ["sbx.python"]  # the second waits
    assert calls.release() == [200, 200]
    assert [q for _, q in grid.worker.sent][1].startswith("node.")


def test_a_call_beyond_the_sessions_slots_waits_then_is_429_session_busy(grid: Grid) -> None:
    s = _session(grid, quotas={"max_parallel_turns": 1})
    grid.worker.hold = threading.Event()
    first: list[Any] = []
    t = threading.Thread(target=lambda: first.append(_exec(grid, s["id"], {"shell": "sleep"})))
    t.start()
    _wait_for(lambda: len(grid.worker.sent) == 1)
    second = _exec(grid, s["id"], {"shell": "echo 2"})  # waits slot_wait_s (0.5 s), then 429
    assert second.status_code == 429
    body = second.json()["error"]
    assert body["code"] == "session_busy" and body["context"]["max"] == 1
    assert float(second.headers["Retry-After"]) > 0
    grid.worker.hold.set()
    t.join(10)
    assert first[0].status_code == 200
    assert _exec(grid, s["id"], {"shell": "echo 3"}).status_code == 200


def test_a_waiting_call_runs_when_a_slot_frees(grid: Grid) -> None:
    s = _session(grid, quotas={"max_parallel_turns": 1})
    calls = _HeldCalls(grid, s["id"], 2)
    _wait_for(lambda: len(grid.worker.sent) == 1)
    time.sleep(0.1)
    assert len(grid.worker.sent) == 1  # the second waits for the slot
    assert calls.release() == [200, 200] and len(grid.worker.sent) == 2


def test_tenant_turn_ceiling_is_429_with_retry_after(grid: Grid) -> None:
    token = grid.add_tenant("tiny", max_concurrent_turns=1)
    a, b = _session(grid, token), _session(grid, token)
    grid.worker.hold = threading.Event()
    t = threading.Thread(target=lambda: _exec(grid, a["id"], {"shell": "x"}, token))
    t.start()
    _wait_for(lambda: len(grid.worker.sent) == 1)
    r = _exec(grid, b["id"], {"shell": "y"}, token)
    assert r.status_code == 429 and r.json()["error"]["code"] == "tenant_limit"
    assert int(r.headers["Retry-After"]) >= 1
    grid.worker.hold.set()
    t.join(10)
    with grid.client(token) as c:
        assert c.exec(b["id"], shell="y").exit_code == 0


def test_backpressure_is_429(grid: Grid) -> None:
    s = _session(grid)
    limit = grid.services.settings.queue_depth_limit
    grid.services.redis.rpush(names.type_queue("python"), *["m"] * (limit + 1))
    r = _exec(grid, s["id"], {"shell": "x"})
    assert r.status_code == 429 and r.json()["error"]["code"] == "backpressure"
    assert "Retry-After" in r.headers
    with grid.client() as c, pytest.raises(LimitExceeded) as caught:
        c.exec(s["id"], shell="x")
    assert caught.value.code == ErrorCode.BACKPRESSURE and caught.value.retry_after > 0


def test_session_ceiling_is_429(grid: Grid) -> None:
    token = grid.add_tenant("two", max_sessions=2)
    _session(grid, token), _session(grid, token)
    r = grid.http.post("/v1/sessions", json={}, headers=grid.headers(token))
    assert r.status_code == 429 and r.json()["error"]["context"]["limit"] == "max_sessions"


def test_quota_ceiling_is_422(grid: Grid) -> None:
    token = grid.add_tenant("small", max_cpus=1.0)
    r = grid.http.post("/v1/sessions", json={"quotas": {"cpus": 2}}, headers=grid.headers(token))
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "quotas.cpus"


def test_worker_lost_is_503_and_frees_the_session(grid: Grid) -> None:
    s = _session(grid)
    grid.worker.node = "doomed"
    grid.services.registry.ledger.heartbeat("doomed", 0.3)
    grid.worker.silent = True
    t0 = time.monotonic()
    r = _exec(grid, s["id"], {"shell": "x"})
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "worker_lost" and err["context"]["node"] == "doomed"
    assert time.monotonic() - t0 < 3
    turn = grid.worker.sent[0][0].turn_id
    assert grid.services.registry.turn_state(turn)["state"] == "abandoned"
    assert not grid.services.registry.ledger.claim_turn(turn, "other")
    grid.worker.silent, grid.worker.node = False, "fake-2"
    assert _exec(grid, s["id"], {"shell": "again"}).status_code == 200


def test_turn_timeout_is_503(grid: Grid) -> None:
    s = _session(grid)
    grid.worker.hold = threading.Event()
    grid.services.runner.turn_margin_s = 0.2
    r = _exec(grid, s["id"], {"shell": "x", "timeout_s": 0.1})
    assert r.status_code == 503 and r.json()["error"]["code"] == "turn_timeout"
    with grid.client() as c, pytest.raises(InfrastructureError):
        c.exec(s["id"], shell="x", timeout_s=0.1)


def test_close(grid: Grid) -> None:
    s = _session(grid)
    assert _exec(grid, s["id"], {"shell": "x"}).status_code == 200
    r = grid.http.delete(f"/v1/sessions/{s['id']}", headers=grid.headers())
    assert r.status_code == 200 and r.json()["state"] == "closed"
    job, queue = grid.worker.sent[-1]
    assert job.op.kind == "close" and queue == names.node_queue("fake-1")
    again = _exec(grid, s["id"], {"shell": "x"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "session_closed"
    assert grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"] == []
    with grid.client() as c, pytest.raises(Conflict):
        c.exec(s["id"], shell="x")


def test_files_through_the_sdk(grid: Grid) -> None:
    with grid.client() as c, c.session(files={"seed.txt": "seed"}) as s:
        assert s.read_file("seed.txt") == "seed"
        s.write_file("a.py", "print(1)")
        assert s.read_file("/workspace/a.py") == "print(1)"
        assert {e.path for e in s.list_files()} == {"seed.txt", "a.py"}
        assert s.delete("a.py") == {"deleted": 1}
        assert s.upload_tar(b"TARDATA") == {"files": 1}
        assert s.download_tar() == b"TARDATA"
        with pytest.raises(InvalidInput):
            s.read_file("../x")
        assert s.exec(shell="echo hi").stdout == "echo hi\n"
    assert s.info.state == "closed"
    with grid.client() as c, pytest.raises(NotFound):
        c.get_session("s-" + "0" * 32)


def test_health_and_docs(grid: Grid) -> None:
    r = grid.http.get("/v1/health")
    assert r.status_code == 200 and r.json()["redis"] is True
    grid.services.registry.ledger.heartbeat("w9", 5)
    assert grid.http.get("/v1/health").json()["workers"] == ["w9"]
    assert grid.http.get("/docs").status_code == 200
    assert "/v1/sessions/{session_id}/exec" in grid.http.get("/openapi.json").json()["paths"]


def test_unexpected_error_is_500_without_traceback(grid: Grid) -> None:
    s = _session(grid)

    def boom(*a: Any, **k: Any) -> None:
        raise RuntimeError("kaboom")

    grid.worker.wait = boom  # type: ignore[method-assign]
    r = _exec(grid, s["id"], {"shell": "x"})
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal"
    assert "Traceback" not in r.text
    # the turn lock was released despite the failure
    assert not grid.services.redis.exists(names.turnlock_key(s["id"]))


def _wait_for(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.005)


def test_payload_too_large_while_streaming(grid: Grid) -> None:
    s = _session(grid)
    chunk = b"x" * (1 << 20)

    def body() -> Any:
        yield b'{"files": [{"path": "a", "content": "'
        for _ in range(6):
            yield chunk
        yield b'"}]}'

    r = grid.http.post(
        f"/v1/sessions/{s['id']}/files",
        content=body(),
        headers={**grid.headers(), "Content-Type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"


def test_async_client_end_to_end(grid: Grid) -> None:
    import asyncio

    import httpx

    from sandgrid.client import AsyncClient

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=grid.app)
        async with AsyncClient("http://testserver", grid.token_a, transport=transport) as c:
            async with c.session(files={"f.txt": b"\x00bin"}) as s:
                assert await s.read_file("f.txt") == "\x00bin"
                assert (await s.exec(["echo", "a"])).stdout == "echo a\n"
                assert [x.id for x in await c.list_sessions()] == [s.id]
            assert s.info.state == "closed"
            s2 = await c.session()
            assert (await c.get_session(s2.id)).id == s2.id
            with pytest.raises(NotFound):
                await c.exec("s-" + "0" * 32, shell="x")

    asyncio.run(scenario())
