"""AgentScope Runtime's manager API in-process: the mapping, and the routes over a fake worker.

The real client against a real grid is ``tests/integration/test_agentscope.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from sandgrid.errors import InvalidInput, NotFound
from sandgrid.models import ExecResult, FileEntry, Quotas, SessionInfo
from sandgrid.ops.code import RunCodeOp
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import StatResult
from scheduler.api.compat import agentscope_files
from scheduler.api.compat.agentscope_answers import (
    container_info,
    container_status,
    fs_entry,
    tool_list,
    tool_result,
)
from scheduler.api.compat.agentscope_models import (
    LABEL_CTX,
    LABEL_TYPE,
    CallToolBody,
    CreateFromPoolBody,
    GetInfoBody,
    IdentityBody,
    ListToolsBody,
    MoveBody,
    PathBody,
    SessionMappingBody,
    grid_type_for,
    labels_for,
)
from tests.support.fakes import Grid


def _post(grid: Grid, path: str, body: dict[str, Any], token: str | None = None) -> Any:
    r = grid.http.post(path, json=body, headers=grid.headers(token))
    assert r.status_code == 200, r.text
    return r.json()["data"]


def _create(grid: Grid, ctx: str = "ctx-1", token: str | None = None) -> str:
    body = {"sandbox_type": "base", "meta": {"session_ctx_id": ctx}}
    sid: str = _post(grid, "/create_from_pool", body, token)
    return sid


# ---- the pure mapping ---------------------------------------------------------


def test_async_twins_positional_args_fill_the_first_field() -> None:
    assert IdentityBody.model_validate({"args": "s-1"}).identity == "s-1"
    assert CreateFromPoolBody.model_validate({"args": "base"}).sandbox_type == "base"
    body = CallToolBody.model_validate({"identity": "s-1", "tool_name": "t"})
    assert body.arguments == {}


def test_bodies_take_what_the_runtime_client_sends_and_refuse_the_rest() -> None:
    """agentscope-runtime 1.1.6 sends each method's own parameters: those, and no other."""
    CreateFromPoolBody.model_validate({"sandbox_type": "base", "meta": {"session_ctx_id": "c"}})
    assert GetInfoBody.model_validate({"identity": "s-1", "_redirect_depth": 1}).identity == "s-1"
    ListToolsBody.model_validate({"identity": "s-1", "tool_type": None})
    CallToolBody.model_validate({"identity": "s-1", "tool_name": "t", "arguments": {}})
    SessionMappingBody.model_validate({"session_ctx_id": "c"})
    MoveBody.model_validate({"source": "a", "destination": "b"})
    PathBody.model_validate({"path": "a"})
    for model, body in (
        (CallToolBody, {"identity": "s-1", "tool_name": "t", "extra": 1}),
        (IdentityBody, {"identity": "s-1", "memory": True}),
        (MoveBody, {"source": "a", "destination": "b", "overwrite": True}),
        (PathBody, {"path": "a", "parents": False}),
    ):
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            model.model_validate(body)


def test_labels_carry_the_session_context() -> None:
    body = CreateFromPoolBody(sandbox_type=None, meta={"session_ctx_id": "abc"})
    assert labels_for(body) == {LABEL_TYPE: "base", LABEL_CTX: "abc"}
    with pytest.raises(ValueError, match=r"meta\.session_ctx_id"):
        labels_for(CreateFromPoolBody(sandbox_type="base", meta={"session_ctx_id": "x" * 300}))


def test_container_info_is_a_container_model_with_the_type_in_version() -> None:
    now = datetime.now(UTC)
    info = SessionInfo(
        id="s-abc",
        tenant="t",
        type="python",
        quotas=Quotas(),
        created_at=now,
        last_used=now,
        labels={LABEL_TYPE: "base", LABEL_CTX: "c"},
    )
    got = container_info(info, "http://h:1/")
    assert got["container_name"] == got["session_id"] == "s-abc"
    assert got["url"] == "http://h:1/proxy/s-abc" and "base" in got["version"]
    assert got["meta"] == {"session_ctx_id": "c"} and got["state"] == "running"
    assert {"session_id", "container_id", "container_name", "url", "ports"} <= set(got)


def test_tool_result_is_split_like_the_runtime() -> None:
    ok = tool_result(ExecResult(exit_code=0, stdout="hi\n"), returncode=True)
    assert ok["isError"] is False
    assert [(c["description"], c["text"]) for c in ok["content"]] == [
        ("stdout", "hi\n"),
        ("returncode", "0"),
    ]
    bad = tool_result(ExecResult(exit_code=None, stderr="boom", timed_out=True), returncode=False)
    assert bad["isError"] is True
    assert [c["description"] for c in bad["content"]] == ["stdout", "stderr", "error"]
    assert "timed out" in bad["content"][-1]["text"]


def test_tool_list_and_fs_entry() -> None:
    assert set(tool_list(None)["generic"]) == {"run_ipython_cell", "run_shell_command"}
    assert tool_list("mcp") == {"mcp": {}}
    entry = fs_entry(FileEntry(path="a/b.txt", type="file", size=3, mtime=1.5))
    assert entry == {
        "path": "/workspace/a/b.txt",
        "name": "b.txt",
        "type": "file",
        "size": 3,
        "mtime_ms": 1500,
    }


# ---- the routes, over the fake worker -------------------------------------------


def test_health_needs_no_token(grid: Grid) -> None:
    assert grid.http.get("/health").json()["status"] == "healthy"


def test_create_maps_onto_a_labelled_python_session(grid: Grid) -> None:
    sid = _create(grid, "ctx-9")
    info = grid.http.get(f"/v1/sessions/{sid}", headers=grid.headers()).json()
    assert info["type"] == "python" and info["labels"][LABEL_CTX] == "ctx-9"
    assert _post(grid, "/get_session_mapping", {"session_ctx_id": "ctx-9"}) == [sid]
    assert _post(grid, "/get_session_mapping_async", {"args": "ctx-9"}) == [sid]
    assert _post(grid, "/list_session_keys", {}) == ["ctx-9"]
    assert _post(grid, "/get_info_async", {"args": sid})["container_name"] == sid
    assert _post(grid, "/check_health", {"identity": sid}) is True


def test_tokens_and_tenants(grid: Grid) -> None:
    r = grid.http.post("/create_from_pool", json={}, headers={})
    assert r.status_code == 401
    sid = _create(grid)
    theirs = grid.http.post("/get_info", json={"identity": sid}, headers=grid.headers(grid.token_b))
    assert theirs.status_code == 404
    assert _post(grid, "/get_session_mapping", {"session_ctx_id": "ctx-1"}, grid.token_b) == []
    assert _post(grid, "/release", {"identity": sid}, grid.token_b) is False


def test_call_tool_runs_turns(grid: Grid) -> None:
    sid = _create(grid)
    body = {"identity": sid, "tool_name": "run_shell_command", "arguments": {"command": "ls"}}
    shell = _post(grid, "/call_tool", body)
    assert shell["isError"] is False and shell["content"][0]["text"] == "ls\n"
    cell = {"identity": sid, "tool_name": "run_ipython_cell", "arguments": {"code": "1+1"}}
    assert _post(grid, "/call_tool_async", cell)["content"][0]["text"] == "1+1\n"
    ops = [j.op for j, _ in grid.worker.sent]
    assert [o.request.shell for o in ops if isinstance(o, ExecOp)] == ["ls"]
    assert [o.request.code for o in ops if isinstance(o, RunCodeOp)] == ["1+1"]  # the kernel
    unknown = _post(grid, "/call_tool", {"identity": sid, "tool_name": "browse"})
    assert unknown["isError"] is True and "not served" in unknown["content"][0]["text"]


def test_call_tool_bad_arguments_name_the_field(grid: Grid) -> None:
    sid = _create(grid)
    body = {"identity": sid, "tool_name": "run_shell_command", "arguments": {"cmd": "ls"}}
    r = grid.http.post("/call_tool", json=body, headers=grid.headers())
    assert r.status_code == 422
    assert r.json()["error"]["context"]["field"] == "arguments.command"
    huge = {
        "identity": sid,
        "tool_name": "run_ipython_cell",
        "arguments": {"code": "x" * (2 << 20)},
    }
    r = grid.http.post("/call_tool", json=huge, headers=grid.headers())
    assert r.status_code in (413, 422)
    assert grid.worker.sent == []


def test_release_closes_the_session(grid: Grid) -> None:
    sid = _create(grid)
    assert _post(grid, "/release_async", {"args": sid}) is True
    assert _post(grid, "/check_health", {"identity": sid}) is False
    assert _post(grid, "/get_session_mapping", {"session_ctx_id": "ctx-1"}) == []
    assert _post(grid, "/release", {"identity": "s-" + "u" * 32}) is False


def test_file_routes(grid: Grid) -> None:
    sid = _create(grid)
    base = f"/proxy/{sid}/workspace"
    h = grid.headers()
    put = grid.http.put(
        f"{base}/file", params={"path": "/workspace/a.txt"}, content=b"hey", headers=h
    )
    assert put.status_code == 200 and put.json()["path"] == "/workspace/a.txt"
    assert put.json()["size"] == 3
    text = grid.http.get(f"{base}/file", params={"path": "a.txt"}, headers=h)
    assert text.status_code == 200 and text.text == "hey"
    files = [("files", ("b.txt", b"B", "text/plain"))]
    batch = grid.http.post(
        f"{base}/files:batch", files=files, data={"paths": ["d/b.txt"]}, headers=h
    )
    assert batch.status_code == 200 and batch.json()[0]["path"] == "/workspace/d/b.txt"
    listed = grid.http.get(f"{base}/list", params={"path": "/workspace"}, headers=h).json()
    assert {e["name"] for e in listed} == {"a.txt"}
    deep = grid.http.get(f"{base}/list", params={"path": "/workspace", "depth": 2}, headers=h)
    assert {e["path"] for e in deep.json()} == {"/workspace/a.txt", "/workspace/d/b.txt"}
    gone = grid.http.delete(f"{base}/entry", params={"path": "a.txt"}, headers=h)
    assert gone.status_code == 204
    assert "a.txt" not in {p for s, p in grid.worker.files if s == sid}


def test_exists_mkdir_and_move_are_the_grids_file_ops(grid: Grid) -> None:
    """Turns of ``stat``, ``mkdir``, ``move`` (resolved beneath the workspace by the
    agent), not a script run by ``exec``: no exec turn is sent."""
    sid = _create(grid)
    base, h = f"/proxy/{sid}/workspace", grid.headers()
    grid.http.put(f"{base}/file", params={"path": "a.txt"}, content=b"hey", headers=h)
    assert grid.http.get(f"{base}/exists", params={"path": "a.txt"}, headers=h).json() == {
        "exists": True
    }
    assert grid.http.get(f"{base}/exists", params={"path": "b"}, headers=h).json() == {
        "exists": False
    }
    made = grid.http.post(f"{base}/mkdir", json={"path": "d"}, headers=h)
    assert made.status_code == 200 and made.json() == {"created": True}
    body = {"source": "a.txt", "destination": "/workspace/d/a.txt"}
    moved = grid.http.post(f"{base}/move", json=body, headers=h)
    assert moved.status_code == 200 and moved.json()["path"] == "/workspace/d/a.txt"
    missing = grid.http.post(f"{base}/move", json={"source": "zz", "destination": "y"}, headers=h)
    assert missing.status_code == 404
    kinds = [j.op.kind for j, _ in grid.worker.sent]
    assert kinds == ["write", "stat", "stat", "mkdir", "move", "move"]


def test_file_paths_may_not_leave_the_workspace(grid: Grid) -> None:
    sid = _create(grid)
    h = grid.headers()
    for params in ({"path": "/etc/passwd"}, {"path": "../x"}):
        r = grid.http.get(f"/proxy/{sid}/workspace/file", params=params, headers=h)
        assert r.status_code == 422 and r.json()["error"]["code"] == "path_outside_workspace"
    r = grid.http.post(
        f"/proxy/{sid}/workspace/move",
        json={"source": "a", "destination": "/tmp/b"},
        headers=h,
    )
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "destination"
    r = grid.http.delete(f"/proxy/{sid}/workspace/entry", params={"path": "/workspace"}, headers=h)
    assert r.status_code == 422
    assert grid.worker.sent == []


def test_file_limits_hold(grid: Grid, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = _create(grid)
    base, h = f"/proxy/{sid}/workspace", grid.headers()
    monkeypatch.setattr(agentscope_files, "MAX_BATCH_FILES", 1)
    two = [("files", ("a", b"A", "text/plain")), ("files", ("b", b"B", "text/plain"))]
    r = grid.http.post(f"{base}/files:batch", files=two, headers=h)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "files"
    r = grid.http.post(f"{base}/files:batch", files=two[:1], data={"paths": ["x", "y"]}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "paths"
    monkeypatch.setattr(agentscope_files, "MAX_FILE_BYTES", 4)
    r = grid.http.put(f"{base}/file", params={"path": "big"}, content=b"12345", headers=h)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "content"
    r = grid.http.get(f"{base}/list", params={"path": ".", "depth": 65}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "depth"
    assert grid.worker.sent == []


# ---- the lifecycle routes (issue 20.3) ------------------------------------------


def test_container_status_speaks_dockers_words() -> None:
    now = datetime.now(UTC)
    base = SessionInfo(
        id="s-" + "a" * 16, tenant="t", type="python", state="new", quotas=Quotas(),
        created_at=now, last_used=now,
    )  # fmt: skip
    assert container_status(base) == "created"
    assert container_status(base.model_copy(update={"owner": "n-1", "state": "live"})) == "running"
    assert container_status(base.model_copy(update={"state": "idle", "snapshot": "x"})) == "exited"
    assert container_status(base.model_copy(update={"state": "closed"})) is None


def test_only_served_types_map_onto_grid_types() -> None:
    assert grid_type_for(None, "python") == "python"
    assert grid_type_for("base", "python-gvisor") == "python-gvisor"  # the configured type
    assert grid_type_for("filesystem", "python") == "python"
    assert grid_type_for("browser", "python") == "browser"  # issue 21.4: the grid's browser type
    for refused in ("gui", "mobile", "bfcl", "appworld", "agentbay", "dummy"):
        with pytest.raises(ValueError, match="not served by sandgrid"):
            grid_type_for(refused, "python")
    with pytest.raises(ValueError, match="training-environment service"):
        grid_type_for("bfcl", "python")  # the reason is said


@pytest.mark.parametrize("path", ["/create", "/create_async", "/create_from_pool"])
@pytest.mark.parametrize("box", ["gui", "mobile", "bfcl", "appworld"])
def test_create_refuses_a_type_the_grid_cannot_serve(grid: Grid, path: str, box: str) -> None:
    r = grid.http.post(path, json={"sandbox_type": box}, headers=grid.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["context"]["field"] == "sandbox_type" and box in err["message"]
    # the runtime's shape too: its client shows "Server Detail: Error in <method>: ..."
    assert r.json()["detail"] == f"Error in {path.strip('/')}: {err['message']}"
    assert grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"] == []


def test_create_takes_the_runtime_parameters(grid: Grid) -> None:
    body = {
        "sandbox_type": "base", "mount_dir": None, "storage_path": None,
        "environment": {"A": "1"}, "meta": {"session_ctx_id": "c-2"},
    }  # fmt: skip
    sid = _post(grid, "/create", body)
    info = grid.http.get(f"/v1/sessions/{sid}", headers=grid.headers()).json()
    assert info["type"] == "python" and info["labels"][LABEL_TYPE] == "base"
    assert _post(grid, "/create_async", {"args": "base"}).startswith("s-")
    for field in ("mount_dir", "storage_path"):
        r = grid.http.post("/create", json={field: "/tmp/x"}, headers=grid.headers())
        assert r.status_code == 422 and r.json()["error"]["context"]["field"] == field


def test_start_stop_and_status(grid: Grid) -> None:
    sid = _create(grid)
    assert _post(grid, "/get_status", {"identity": sid}) == "created"
    assert _post(grid, "/start", {"identity": sid}) is True
    assert _post(grid, "/get_status_async", {"args": sid}) == "running"
    assert _post(grid, "/stop_async", {"args": sid}) is True
    assert _post(grid, "/get_status", {"identity": sid}) == "exited"
    assert _post(grid, "/start_async", {"args": sid}) is True
    assert _post(grid, "/get_status", {"identity": sid}) == "running"
    unknown = "s-" + "u" * 32
    assert _post(grid, "/start", {"identity": unknown}) is False
    assert _post(grid, "/stop", {"identity": unknown}) is True  # as the runtime's
    assert _post(grid, "/get_status", {"identity": unknown}) is None


def test_cleanup_closes_only_agentscope_sandboxes(grid: Grid) -> None:
    a, b = _create(grid, "c-a"), _create(grid, "c-b")
    other = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
    assert _post(grid, "/cleanup", {}) is None
    assert _post(grid, "/check_health", {"identity": a}) is False
    assert _post(grid, "/check_health", {"identity": b}) is False
    assert _post(grid, "/list_session_keys", {}) == []
    kept = grid.http.get(f"/v1/sessions/{other}", headers=grid.headers()).json()
    assert kept["state"] != "closed"
    assert _post(grid, "/cleanup_async", {}) is None
    assert grid.http.post("/cleanup", json={"x": 1}, headers=grid.headers()).status_code == 422


@pytest.mark.parametrize("path", ["/add_mcp_servers", "/add_mcp_servers_async"])
def test_add_mcp_servers_is_refused_not_faked(grid: Grid, path: str) -> None:
    sid = _create(grid)
    body = {"identity": sid, "server_configs": {"mcpServers": {}}, "overwrite": False}
    r = grid.http.post(path, json=body, headers=grid.headers())
    assert r.status_code == 501
    assert r.json()["detail"].startswith("Error in add_mcp_servers: ")
    missing = {**body, "identity": "s-" + "u" * 32}
    assert grid.http.post(path, json=missing, headers=grid.headers()).status_code == 404


def test_cut_output_is_an_error_named_as_such() -> None:
    cut = tool_result(ExecResult(exit_code=0, stdout="x", stdout_truncated=True), returncode=True)
    assert cut["isError"] is True
    assert "cut" in cut["content"][-1]["text"] and cut["content"][-1]["description"] == "error"


def _faked_workspace(grid: Grid, monkeypatch: pytest.MonkeyPatch, fake: Any) -> str:
    """A new sandbox whose file ops answer as ``fake(op)`` says (None: the fake worker's
    own answer), as the agent reports OS errors; the sandbox's workspace route prefix."""
    sid = _create(grid)
    real = grid.worker._apply
    monkeypatch.setattr(grid.worker, "_apply", lambda job: fake(job.op) or real(job))
    return f"/proxy/{sid}/workspace"


def test_file_errors_have_the_runtimes_status_codes(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent reports OS errors as ``invalid_input``; the routes answer as the runtime."""

    def agent_like(op: Any) -> Any:  # 'd' is a directory, 'gone' is missing
        path = getattr(op, "path", None) or next((f.path for f in getattr(op, "files", [])), None)
        if op.kind == "stat" and path == "d":
            return StatResult(entry=FileEntry(path="d", type="dir"))
        if op.kind in ("read", "list", "delete", "write") and path in ("d", "gone"):
            raise InvalidInput("[Errno 2] or [Errno 21]", operation=op.kind)
        return None

    base, h = _faked_workspace(grid, monkeypatch, agent_like), grid.headers()
    for path in ("gone", "d"):
        r = grid.http.get(f"{base}/file", params={"path": path}, headers=h)
        assert r.status_code == 404, r.text
    assert grid.http.get(f"{base}/list", params={"path": "gone"}, headers=h).status_code == 404
    assert grid.http.delete(f"{base}/entry", params={"path": "gone"}, headers=h).status_code == 204
    r = grid.http.put(f"{base}/file", params={"path": "d"}, content=b"x", headers=h)
    assert r.status_code == 409 and "is a directory" in r.json()["error"]["message"]
    grid.http.put(f"{base}/file", params={"path": "f"}, content=b"x", headers=h)
    listed_file = grid.http.get(f"{base}/list", params={"path": "f"}, headers=h)
    assert listed_file.status_code == 404  # the runtime lists directories only


def test_a_browser_tool_on_a_base_sandbox_is_422_naming_the_type(grid: Grid) -> None:
    sid = _create(grid)
    body = {"identity": sid, "tool_name": "browser_navigate", "arguments": {"url": "about:blank"}}
    r = grid.http.post("/call_tool", json=body, headers=grid.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["context"]["field"] == "type" and "'python'" in err["message"]
    unserved = _post(grid, "/call_tool", {**body, "tool_name": "browser_tab_list"})
    assert unserved["isError"] and "not served by sandgrid" in unserved["content"][0]["text"]


def test_mkdir_over_a_file_is_409_and_errors_carry_the_runtimes_detail(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the runtime: 409 "path exists and is not a directory"; every error has ``detail``."""

    def agent_like(op: Any) -> Any:  # 'f' is a file; a move's source 'gone' is missing
        if op.kind == "stat" and op.path == "f":
            return StatResult(entry=FileEntry(path="f", type="file"))
        if op.kind == "mkdir" and op.path == "f":
            raise InvalidInput("[Errno 17] File exists", operation=op.kind)
        if op.kind == "move" and op.source == "gone":
            raise NotFound("no such file: gone", operation=op.kind)
        return None

    base, h = _faked_workspace(grid, monkeypatch, agent_like), grid.headers()
    r = grid.http.post(f"{base}/mkdir", json={"path": "f"}, headers=h)
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == "path exists and is not a directory"
    r = grid.http.post(f"{base}/move", json={"source": "gone", "destination": "x"}, headers=h)
    assert (r.status_code, r.json()["detail"]) == (404, "source not found")
    assert r.json()["error"]["code"] == "not_found"  # the grid's object is kept beside it
    r = grid.http.get(f"{base}/file", params={"path": "../etc/passwd"}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "path_outside_workspace"
    assert "path" in r.json()["detail"]  # bad input names the field in detail too
    r = grid.http.get(f"/proxy/s-{'u' * 32}/workspace/list", params={"path": "."}, headers=h)
    assert r.status_code == 404 and r.json()["detail"]
