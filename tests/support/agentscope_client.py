"""agentscope-runtime's own client against a grid: run with the python of its own venv.

``python agentscope_client.py API_URL TOKEN OUT.json``: drives ``BaseSandbox``,
``BaseSandboxAsync`` and ``SandboxService`` of agentscope-runtime 1.1.6 (remote
mode, ``base_url=`` the grid's API) and writes what they returned as JSON to
``OUT.json`` for ``tests/integration/test_agentscope.py`` to assert on. It
imports nothing of sandgrid: it is what an AgentScope user runs, unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentscope_runtime.engine.services.sandbox.sandbox_service import SandboxService
from agentscope_runtime.sandbox import BaseSandbox, BaseSandboxAsync
from mcp.types import CallToolResult

__all__ = ["main"]


def _tool(result: Any) -> dict[str, Any]:
    """A tool's answer, checked to be an MCP CallToolResult; its texts by description."""
    CallToolResult.model_validate(result)
    texts = {c.get("description", "?"): c["text"] for c in result["content"]}
    return {"isError": result["isError"], "texts": texts}


def _sandbox(url: str, token: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with BaseSandbox(base_url=url, bearer_token=token) as box:
        sid = box.sandbox_id
        out["sandbox_id"] = sid
        out["info"] = box.get_info()
        out["tools"] = sorted(box.list_tools()["generic"])
        out["health"] = box.manager_api.check_health(sid)
        out["shell"] = _tool(box.run_shell_command("echo hello; echo oops >&2; exit 3"))
        out["ipython"] = _tool(box.run_ipython_cell("total = sum(range(10)); print(total)"))
        out["ipython_state"] = _tool(box.run_ipython_cell("total * 2"))
        out["ipython_error"] = _tool(box.run_ipython_cell("1/0"))
        fs = box.fs
        out["write"] = fs.write("/workspace/notes/a.txt", "alpha")
        out["read"] = fs.read("notes/a.txt")
        out["read_bytes"] = fs.read("notes/a.txt", fmt="bytes").hex()
        out["write_many"] = fs.write_many(
            [{"path": "b.bin", "data": b"\x00\xff"}, {"path": "notes/c.txt", "data": "gamma"}]
        )
        out["list"] = fs.list("/workspace", depth=2)
        out["exists"] = [fs.exists("notes/a.txt"), fs.exists("nope")]
        out["mkdir"] = [fs.mkdir("made/deep"), fs.mkdir("made/deep")]
        out["move"] = fs.move("notes/a.txt", "moved/a.txt")
        fs.remove("notes")
        out["after"] = sorted(e["path"] for e in fs.list("/workspace", depth=1))
        out["shell_sees"] = _tool(box.run_shell_command("cat moved/a.txt; od -An -tx1 b.bin"))
    out["released_health"] = box.manager_api.check_health(sid)
    return out


async def _async_sandbox(url: str, token: str) -> dict[str, Any]:
    async with BaseSandboxAsync(base_url=url, bearer_token=token) as box:
        info = await box.get_info_async()
        ran = await box.call_tool_async("run_shell_command", {"command": "echo async"})
        sid = box.sandbox_id
    return {"sandbox_id": sid, "info_name": info["container_name"], "ran": _tool(ran)}


async def _service(url: str, token: str) -> dict[str, Any]:
    svc = SandboxService(base_url=url, bearer_token=token)
    await svc.start()
    first = svc.connect("chat-1", user_id="u1")
    ran = _tool(first[0].run_shell_command("echo svc > s.txt; cat s.txt"))
    again = svc.connect("chat-1", user_id="u1")
    out = {
        "first": [b.sandbox_id for b in first],
        "again": [b.sandbox_id for b in again],
        "again_class": type(again[0]).__name__,
        "ran": ran,
        "mapping": svc.manager_api.get_session_mapping("chat-1_u1"),
    }
    svc.release("chat-1", user_id="u1")
    out["after_release"] = svc.manager_api.get_session_mapping("chat-1_u1")
    drained = svc.connect("chat-2")
    await svc.stop()  # drains every session context it finds
    out["drained_health"] = [_health(url, token, b.sandbox_id) for b in drained]
    return out


def _health(url: str, token: str, sid: str) -> Any:
    return BaseSandbox(base_url=url, bearer_token=token).manager_api.check_health(sid)


def main(argv: list[str]) -> None:
    url, token, path = argv
    out = {
        "sandbox": _sandbox(url, token),
        "async": asyncio.run(_async_sandbox(url, token)),
        "service": asyncio.run(_service(url, token)),
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1:])
