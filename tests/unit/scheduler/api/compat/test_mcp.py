"""The MCP endpoint in-process: real Redis, a fake worker; JSON-RPC over the test client.

The transport is stateless and answers JSON, so one POST is one call. The same
tools against the real grid, through the ``mcp`` client library, are in
``tests/integration/test_mcp.py``.
"""

from __future__ import annotations

from typing import Any

from scheduler.api.compat.mcp import MCP_PATH
from tests.support.fakes import Grid

_ACCEPT = {"Accept": "application/json, text/event-stream"}
BROWSER_TOOLS = ("browser_navigate", "browser_screenshot", "browser_click", "browser_type")
BROWSER_TOOLS += ("browser_snapshot",)


def _rpc(grid: Grid, method: str, params: dict[str, Any], token: str | None = None) -> Any:
    headers = {**_ACCEPT, **(grid.headers(token) if token != "" else {})}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return grid.http.post(MCP_PATH, json=body, headers=headers)


def _call(grid: Grid, tool: str, **arguments: Any) -> dict[str, Any]:
    r = _rpc(grid, "tools/call", {"name": tool, "arguments": arguments})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["result"]
    return out


def test_no_token_or_a_wrong_one_is_401(grid: Grid) -> None:
    for token in ("", "tok-unknown-" + "x" * 24):
        r = _rpc(grid, "tools/list", {}, token)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["www-authenticate"] == "Bearer"


def test_tools_have_json_schemas(grid: Grid) -> None:
    r = _rpc(grid, "tools/list", {})
    assert r.status_code == 200, r.text
    tools = {t["name"]: t for t in r.json()["result"]["tools"]}
    assert set(tools) == {
        "create_session",
        "close_session",
        "exec",
        "read_file",
        "write_file",
        "list_files",
        "run_code",
        *BROWSER_TOOLS,
    }
    schema = tools["write_file"]["inputSchema"]
    assert schema["type"] == "object" and schema["required"] == ["session_id", "path", "content"]
    assert schema["properties"]["encoding"]["enum"] == ["utf-8", "base64"]
    assert "ctx" not in schema["properties"]


def test_create_write_read_exec_close(grid: Grid) -> None:
    info = _call(grid, "create_session", labels={"via": "mcp"})["structuredContent"]
    sid = info["id"]
    assert info["tenant"] == "acme" and info["labels"] == {"via": "mcp"}
    wrote = _call(grid, "write_file", session_id=sid, path="a.txt", content="hi")
    assert not wrote.get("isError"), wrote
    ran = _call(grid, "exec", session_id=sid, argv=["echo", "x"])["structuredContent"]
    assert ran["exit_code"] == 0 and ran["stdout"] == "echo x\n"
    closed = _call(grid, "close_session", session_id=sid)["structuredContent"]
    assert closed["state"] == "closed"


def test_errors_name_the_code_and_the_field(grid: Grid) -> None:
    sid = _call(grid, "create_session")["structuredContent"]["id"]
    escape = _call(grid, "read_file", session_id=sid, path="../etc/passwd")
    assert escape["isError"] and "invalid_input" in escape["content"][0]["text"]
    assert "path" in escape["content"][0]["text"] and "leaves the workspace" in str(escape)
    both = _call(grid, "exec", session_id=sid, command="true", argv=["true"])
    assert both["isError"] and "exactly one of argv, shell, python" in str(both)
    quota = _call(grid, "create_session", quotas={"memory_mb": 1})
    assert quota["isError"] and "memory_mb" in str(quota)
    theirs = _rpc(
        grid,
        "tools/call",
        {"name": "close_session", "arguments": {"session_id": sid}},
        grid.token_b,
    ).json()["result"]
    assert theirs["isError"] and "not_found: session" in theirs["content"][0]["text"]


def test_run_code_is_a_tool(grid: Grid) -> None:
    listed = _rpc(grid, "tools/list", {}).json()["result"]["tools"]
    tool = next(t for t in listed if t["name"] == "run_code")
    assert tool["inputSchema"]["required"] == ["session_id", "code"]


def test_an_argument_a_tool_does_not_take_is_an_error_naming_it(grid: Grid) -> None:
    """Issue 23.13: the MCP SDK ignores unknown arguments; ours refuse them."""
    sid = _call(grid, "create_session")["structuredContent"]["id"]
    sent = len(grid.worker.sent)
    extra = _call(grid, "exec", session_id=sid, command="true", sudo=True)
    assert extra["isError"] and "sudo" in str(extra) and "Extra inputs" in str(extra), extra
    assert len(grid.worker.sent) == sent  # refused before any turn
    tools = _rpc(grid, "tools/list", {}).json()["result"]["tools"]
    assert all(t["inputSchema"].get("additionalProperties") is False for t in tools)
    assert _call(grid, "close_session", session_id=sid)["structuredContent"]["state"] == "closed"


def test_a_body_over_the_grids_cap_is_a_json_rpc_error_naming_the_limit(grid: Grid) -> None:
    """Issue 20.5: the MCP client shows a JSON-RPC error body, and nothing else, to
    the model; the grid's 413 on ``/mcp`` is in that shape, with the rule in it."""
    limit = grid.services.settings.max_body_bytes
    args = {"session_id": "s-" + "x" * 32, "path": "a", "content": "x" * (limit + 10)}
    r = _rpc(grid, "tools/call", {"name": "write_file", "arguments": args})
    assert r.status_code == 413 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["code"] == -32600
    assert body["error"]["message"].startswith("payload_too_large: ")
    assert str(limit) in body["error"]["message"]
    assert body["error"]["data"]["context"]["field"] == "body"


def test_browser_tools_refuse_a_session_without_a_browser(grid: Grid) -> None:
    sid = _call(grid, "create_session")["structuredContent"]["id"]
    out = _call(grid, "browser_navigate", session_id=sid, url="http://127.0.0.1:8000/")
    assert out["isError"], out
    text = out["content"][0]["text"]
    assert "invalid_input:" in text and "'python'" in text and "browser" in text
    out = _call(grid, "browser_snapshot", session_id="s-nope")
    assert out["isError"] and "not_found:" in out["content"][0]["text"], out
