"""The MCP endpoint of the API against the real grid, through the ``mcp`` client library.

A client with a tenant's token creates a session, writes, lists and reads files,
runs commands and closes it, all as MCP tools; errors come back as tool errors
that name their code and field; no token, or a wrong one, is 401.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.grid_fixtures import TOKEN, BatchGrid, batch_grid  # noqa: F401

pytestmark = pytest.mark.integration

T = TypeVar("T")


def _with_mcp(grid: BatchGrid, body: Callable[[ClientSession], Awaitable[T]]) -> T:
    async def main() -> T:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(f"{grid.api_url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await body(session)

    return asyncio.run(main())


async def _ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def _error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    return " ".join(getattr(c, "text", "") for c in result.content)


def test_a_session_through_mcp_tools(batch_grid: BatchGrid) -> None:  # noqa: F811
    async def body(s: ClientSession) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert {"create_session", "close_session", "exec", "read_file"} <= set(tools)
        assert {"write_file", "list_files"} <= set(tools)
        assert tools["run_code"].input_schema["required"] == ["session_id", "code"]
        assert tools["exec"].input_schema["required"] == ["session_id"]
        sid = (await _ok(s, "create_session", labels={"via": "mcp"}))["id"]
        await _ok(s, "write_file", session_id=sid, path="pkg/hello.py", content="print(6 * 7)\n")
        listed = await _ok(s, "list_files", session_id=sid, path="pkg")
        assert [e["path"] for e in listed["entries"]] == ["pkg/hello.py"]
        ran = await _ok(s, "exec", session_id=sid, command="python3 pkg/hello.py")
        assert (ran["exit_code"], ran["stdout"]) == (0, "42\n")
        argv = await _ok(s, "exec", session_id=sid, argv=["sh", "-c", "echo $0"], cwd="pkg")
        assert argv["exit_code"] == 0
        slow = await _ok(s, "exec", session_id=sid, command="sleep 20", timeout_s=1)
        assert slow["timed_out"] is True
        await _ok(s, "run_code", session_id=sid, code="x = 20")
        assert (await _ok(s, "run_code", session_id=sid, code="x + 22"))["result"] == "42"
        read = await _ok(s, "read_file", session_id=sid, path="/workspace/pkg/hello.py")
        assert read["content"] == "print(6 * 7)\n"
        assert (await _ok(s, "close_session", session_id=sid))["state"] == "closed"
        gone = await _error(s, "exec", session_id=sid, command="true")
        assert "session_closed" in gone or "not_found" in gone

    _with_mcp(batch_grid, body)


def test_errors_name_their_code_and_field(batch_grid: BatchGrid) -> None:  # noqa: F811
    async def body(s: ClientSession) -> None:
        sid = (await _ok(s, "create_session"))["id"]
        await _ok(s, "exec", session_id=sid, command="ln -s /etc/passwd leak")
        leak = await _error(s, "read_file", session_id=sid, path="leak")
        assert "path_outside_workspace: path 'leak' refused: a symlink" in leak, leak
        dots = await _error(s, "write_file", session_id=sid, path="../x", content="x")
        assert "invalid_input" in dots and "path" in dots
        quota = await _error(s, "create_session", quotas={"memory_mb": 1})
        assert "memory_mb" in quota
        unknown = await _error(s, "close_session", session_id="s-" + "x" * 32)
        assert "not_found" in unknown
        await _ok(s, "close_session", session_id=sid)

    _with_mcp(batch_grid, body)


def test_no_token_is_401(batch_grid: BatchGrid) -> None:  # noqa: F811
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in (accept, {**accept, "Authorization": "Bearer tok-wrong-" + "z" * 24}):
        r = httpx.post(f"{batch_grid.api_url}/mcp", json=body, headers=headers, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
