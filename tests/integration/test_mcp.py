"""The MCP endpoint of the API against the real grid, through the ``mcp`` client library.

A client with a tenant's token creates a session, writes, lists and reads files,
runs commands and closes it, all as MCP tools; errors come back as tool errors
that name their code and field; no token, or a wrong one, is 401. Each check that
makes a session runs on runc (`python`) and on runsc (`python-gvisor`), on a grid
of its own.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from sandgrid.localgrid import LocalGrid
from sandgrid.models import MAX_FILE_BYTES
from sandgrid.wire.settings import DEFAULT_MAX_BODY_BYTES
from tests.support.one_node_grid import one_node_fixture

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_MCP_API_PORT", "8747"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-mcp-" + "m" * 24

grid = one_node_fixture(
    "mcp", port=PORT, redis_url=REDIS_URL, token=TOKEN, types="python,python-gvisor"
)


@pytest.fixture(
    params=[
        pytest.param("python", id="runc"),
        pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
    ]
)
def kind(request: pytest.FixtureRequest) -> str:
    """The session type a test's MCP sessions are made of: each check on both runtimes."""
    return str(request.param)


T = TypeVar("T")


def _with_mcp(
    grid: LocalGrid, body: Callable[[ClientSession], Awaitable[T]], token: str = TOKEN
) -> T:
    async def main() -> T:
        headers = {"Authorization": f"Bearer {token}"}
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


def _refusal(tool: str, text: str) -> str:
    """The grid's refusal, after the prefix the ``mcp`` package puts before it."""
    prefix = f"Error executing tool {tool}: "
    assert text.startswith(prefix), text
    return text[len(prefix) :]


def test_a_session_through_mcp_tools(grid: LocalGrid, kind: str) -> None:
    async def body(s: ClientSession) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert {"create_session", "close_session", "exec", "read_file"} <= set(tools)
        assert {"write_file", "list_files"} <= set(tools)
        assert tools["run_code"].input_schema["required"] == ["session_id", "code"]
        assert tools["exec"].input_schema["required"] == ["session_id"]
        sid = (await _ok(s, "create_session", type=kind, labels={"via": "mcp"}))["id"]
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

    _with_mcp(grid, body)


def test_errors_name_their_code_and_field(grid: LocalGrid, kind: str) -> None:
    async def body(s: ClientSession) -> None:
        sid = (await _ok(s, "create_session", type=kind))["id"]
        await _ok(s, "exec", session_id=sid, command="ln -s /etc/passwd leak")
        leak = await _error(s, "read_file", session_id=sid, path="leak")
        assert "path_outside_workspace: path 'leak' refused: a symlink" in leak, leak
        dots = await _error(s, "write_file", session_id=sid, path="../x", content="x")
        assert "invalid_input" in dots and "path" in dots
        quota = await _error(s, "create_session", type=kind, quotas={"memory_mb": 1})
        assert "memory_mb" in quota
        unknown = await _error(s, "close_session", session_id="s-" + "x" * 32)
        assert "not_found" in unknown
        await _ok(s, "close_session", session_id=sid)

    _with_mcp(grid, body)


def test_no_token_is_401(grid: LocalGrid) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    for headers in (accept, {**accept, "Authorization": "Bearer tok-wrong-" + "z" * 24}):
        r = httpx.post(f"{grid.api_url}/mcp", json=body, headers=headers, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_a_file_up_to_the_grid_limit_goes_through_mcp(grid: LocalGrid, kind: str) -> None:
    """Issue 20.5: the transport's 4 MiB body cap no longer stops a 16 MiB file.

    The largest file the grid takes (``MAX_FILE_BYTES``), base64 in the JSON-RPC
    body (about 21 MiB), is written and read back byte for byte; a body over the
    grid's ``max_body_bytes`` is a JSON-RPC error naming the limit, not the
    client's opaque "Server returned an error response".
    """
    data = bytes(range(256)) * (MAX_FILE_BYTES // 256)
    b64 = base64.b64encode(data).decode()

    async def body(s: ClientSession) -> None:
        sid = (await _ok(s, "create_session", type=kind))["id"]
        await _ok(s, "write_file", session_id=sid, path="big.bin", content=b64, encoding="base64")
        read = await _ok(s, "read_file", session_id=sid, path="big.bin", encoding="base64")
        assert read["content"] == b64 and read["size"] == MAX_FILE_BYTES
        ran = await _ok(s, "exec", session_id=sid, command="wc -c < big.bin")
        assert ran["stdout"].strip() == str(MAX_FILE_BYTES)
        with pytest.raises(MCPError) as huge:
            await s.call_tool(
                "write_file",
                {"session_id": sid, "path": "y", "content": "a" * (DEFAULT_MAX_BODY_BYTES + 1)},
            )
        text = str(huge.value)
        assert "payload_too_large" in text and str(DEFAULT_MAX_BODY_BYTES) in text, text
        await _ok(s, "close_session", session_id=sid)

    _with_mcp(grid, body)


def test_tool_errors_carry_the_codes_rest_answers(grid: LocalGrid, kind: str) -> None:
    """Issue 20.5: each file tool's refusal has the code the REST route gives.

    A missing file or directory is ``not_found`` (it was ``invalid_input``), on
    MCP exactly as over ``/v1/sessions/{id}/files``.
    """
    rest = httpx.Client(
        base_url=grid.api_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    )

    def rest_code(r: httpx.Response) -> str:
        assert r.status_code >= 400, r.text
        return str(r.json()["error"]["code"])

    async def body(s: ClientSession) -> None:
        sid = (await _ok(s, "create_session", type=kind))["id"]
        await _ok(s, "exec", session_id=sid, command="mkdir d && echo x > f")
        files = f"/v1/sessions/{sid}/files"
        cases = [
            (
                "read_file",
                {"path": "nope.txt"},
                lambda: rest.get(files, params={"path": "nope.txt"}),
            ),
            (
                "list_files",
                {"path": "nodir"},
                lambda: rest.get(files + "/list", params={"path": "nodir"}),
            ),
            ("read_file", {"path": "d"}, lambda: rest.get(files, params={"path": "d"})),
            (
                "write_file",
                {"path": "d", "content": "x"},
                lambda: rest.post(files, json={"files": [{"path": "d", "content": "x"}]}),
            ),
            (
                "write_file",
                {"path": "f/g", "content": "x"},
                lambda: rest.post(files, json={"files": [{"path": "f/g", "content": "x"}]}),
            ),
        ]
        for tool, args, over_rest in cases:
            code = rest_code(await asyncio.to_thread(over_rest))
            text = _refusal(tool, await _error(s, tool, session_id=sid, **args))
            assert text.startswith(f"{code}: "), (tool, args, code, text)
        missing = await _error(s, "read_file", session_id=sid, path="nope.txt")
        assert _refusal("read_file", missing).startswith("not_found: "), missing
        await _ok(s, "close_session", session_id=sid)

    try:
        _with_mcp(grid, body)
    finally:
        rest.close()


def test_four_tool_calls_at_once_on_one_session(grid: LocalGrid, kind: str) -> None:
    """Issue 20.1/20.5: an MCP client's parallel tool calls on one session all succeed.

    Needs the concurrent-turns change (20.1): before it, 3 of the 4 answer
    ``session_busy``.
    """

    async def body(s: ClientSession) -> None:
        sid = (await _ok(s, "create_session", type=kind))["id"]
        await _ok(s, "exec", session_id=sid, command="true")  # live before the burst
        calls = [_ok(s, "exec", session_id=sid, command=f"sleep 1; echo {i}") for i in range(3)] + [
            _ok(s, "write_file", session_id=sid, path="w.txt", content="w")
        ]
        results = await asyncio.gather(*(asyncio.ensure_future(c) for c in calls))
        assert [r["stdout"] for r in results[:3]] == ["0\n", "1\n", "2\n"]
        assert results[3]["written"] == 1
        await _ok(s, "close_session", session_id=sid)

    _with_mcp(grid, body)
