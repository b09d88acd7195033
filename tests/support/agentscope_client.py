"""agentscope-runtime's own client against a grid: run with the python of its own venv.

``python agentscope_client.py API_URL TOKEN OUT.json``: drives ``BaseSandbox``,
``BaseSandboxAsync`` and ``SandboxService`` of agentscope-runtime 1.1.6 (remote
mode, ``base_url=`` the grid's API) and writes what they returned as JSON to
``OUT.json`` for ``tests/integration/test_agentscope.py`` to assert on. It
imports nothing of sandgrid: it is what an AgentScope user runs, unchanged.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from typing import Any

import httpx
import requests
from agentscope_runtime.engine.services.sandbox.sandbox_service import SandboxService
from agentscope_runtime.sandbox import (
    BaseSandbox,
    BaseSandboxAsync,
    FilesystemSandbox,
    FilesystemSandboxAsync,
)
from agentscope_runtime.sandbox.manager.sandbox_manager import SandboxManager
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
    fs_first = svc.connect("chat-fs", user_id="u1", sandbox_types=["filesystem"])
    fs_again = svc.connect("chat-fs", user_id="u1", sandbox_types=["filesystem"])
    out["fs_classes"] = [type(fs_first[0]).__name__, type(fs_again[0]).__name__]
    out["fs_same"] = fs_first[0].sandbox_id == fs_again[0].sandbox_id
    out["fs_ran"] = fs_again[0].list_allowed_directories()["content"][0]["text"]
    svc.release("chat-fs", user_id="u1")
    svc.release("chat-1", user_id="u1")
    out["after_release"] = svc.manager_api.get_session_mapping("chat-1_u1")
    drained = svc.connect("chat-2")
    await svc.stop()  # drains every session context it finds
    out["drained_health"] = [_health(url, token, b.sandbox_id) for b in drained]
    return out


def _health(url: str, token: str, sid: str) -> Any:
    return BaseSandbox(base_url=url, bearer_token=token).manager_api.check_health(sid)


def _lifecycle(url: str, token: str) -> dict[str, Any]:
    """create, get_status, stop, start, add_mcp_servers, cleanup: the sync methods."""
    api = SandboxManager(base_url=url, bearer_token=token)
    sid = api.create(sandbox_type="base", environment={"ASCOPE_ENV": "seen"}, meta={})
    out: dict[str, Any] = {"created": api.get_status(sid)}
    env = api.call_tool(sid, "run_shell_command", {"command": "echo $ASCOPE_ENV > kept.txt"})
    out["env"] = _tool(env)
    out["running"] = api.get_status(sid)
    out["stop"] = api.stop(sid)
    out["stopped"] = api.get_status(sid)
    out["start"] = api.start(sid)
    out["started"] = api.get_status(sid)
    out["kept"] = _tool(api.call_tool(sid, "run_shell_command", {"command": "cat kept.txt"}))
    out["mcp"] = api.add_mcp_servers(sid, {"mcpServers": {}})
    out["unknown"] = [api.get_status("s-nope"), api.start("s-nope"), api.stop("s-nope")]
    other = api.create_from_pool(sandbox_type="base")
    out["bad_type"] = api.create(sandbox_type="gui")
    out["bfcl"] = api.create_from_pool(sandbox_type="bfcl")
    out["cleanup"] = api.cleanup()
    out["after_cleanup"] = [api.get_status(sid), api.get_status(other)]
    out["health_after"] = [api.check_health(sid), api.check_health(other)]
    return out


async def _lifecycle_async(url: str, token: str) -> dict[str, Any]:
    """The ``_async`` twins of the same methods, positional arguments as users pass them."""
    api = SandboxManager(base_url=url, bearer_token=token)
    sid = await api.create_async("base")
    out: dict[str, Any] = {"created": await api.get_status_async(sid)}
    await api.call_tool_async(sid, "run_shell_command", {"command": "echo a > kept.txt"})
    out["running"] = await api.get_status_async(sid)
    out["stop"] = await api.stop_async(sid)
    out["stopped"] = await api.get_status_async(sid)
    out["start"] = await api.start_async(sid)
    out["started"] = await api.get_status_async(sid)
    kept = await api.call_tool_async(sid, "run_shell_command", {"command": "cat kept.txt"})
    out["kept"] = _tool(kept)
    out["mcp"] = await api.add_mcp_servers_async(sid, {"mcpServers": {}})
    out["bad_type"] = await api.create_from_pool_async("mobile")
    out["cleanup"] = await api.cleanup_async()
    out["after_cleanup"] = await api.get_status_async(sid)
    await api.httpx_client.aclose()
    return out


def _code(call: Any) -> int | str:
    """The HTTP status the runtime's client raised with, or "ok" when it raised none."""
    try:
        call()
    except requests.HTTPError as exc:
        return exc.response.status_code
    return "ok"


async def _acode(call: Any) -> int | str:
    try:
        await call()
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return "ok"


def _file_codes(url: str, token: str) -> dict[str, Any]:
    """The file API's status codes as ``sandbox.fs`` sees them (and its async twin's)."""
    with BaseSandbox(base_url=url, bearer_token=token) as box:
        fs = box.fs
        fs.write("d/f.txt", "x")
        out: dict[str, Any] = {
            "read_missing": _code(lambda: fs.read("nope.txt")),
            "read_dir": _code(lambda: fs.read("d")),
            "list_missing": _code(lambda: fs.list("nope")),
            "list_file": _code(lambda: fs.list("d/f.txt")),
            "write_dir": _code(lambda: fs.write("d", "y")),
            "write_many_dir": _code(lambda: fs.write_many([{"path": "d", "data": "y"}])),
            "remove_missing": _code(lambda: fs.remove("nope")),
            "mkdir_file": _code(lambda: fs.mkdir("d/f.txt")),
            "move_missing": _code(lambda: fs.move("nope", "x")),
        }
        try:
            fs.read("nope.txt")
        except requests.HTTPError as exc:
            out["detail"] = exc.response.json().get("detail")
    return out


async def _file_codes_async(url: str, token: str) -> dict[str, Any]:
    async with BaseSandboxAsync(base_url=url, bearer_token=token) as box:
        fs = box.fs
        await fs.write_async("d/f.txt", "x")
        return {
            "read_missing": await _acode(lambda: fs.read_async("nope.txt")),
            "read_dir": await _acode(lambda: fs.read_async("d")),
            "list_missing": await _acode(lambda: fs.list_async("nope")),
            "write_dir": await _acode(lambda: fs.write_async("d", "y")),
            "remove_missing": await _acode(lambda: fs.remove_async("nope")),
        }


_BIG = "head -c 1100000 /dev/zero | tr '\\0' a"
_BIG_ERR = "head -c 1100000 /dev/zero | tr '\\0' a >&2"
_BIG_CELL = "print('a' * 1_100_000)"


def _truncation(url: str, token: str) -> dict[str, Any]:
    """More than 1 MiB of output: what the runtime's client gets (sync and async)."""

    def seen(result: Any) -> dict[str, Any]:
        CallToolResult.model_validate(result)
        texts = {c.get("description", "?"): c["text"] for c in result["content"]}
        return {
            "isError": result["isError"],
            "sizes": {k: len(v) for k, v in texts.items()},
            "error": texts.get("error", ""),
            "stderr": texts.get("stderr", "")[-300:],
        }

    async def twin(sid: str) -> Any:
        api = SandboxManager(base_url=url, bearer_token=token)
        try:
            return await api.call_tool_async(sid, "run_shell_command", {"command": _BIG})
        finally:
            await api.httpx_client.aclose()

    with BaseSandbox(base_url=url, bearer_token=token) as box:
        return {
            "stdout": seen(box.run_shell_command(_BIG)),
            "stderr": seen(box.run_shell_command(_BIG_ERR)),
            "cell": seen(box.run_ipython_cell(_BIG_CELL)),
            "async": seen(asyncio.run(twin(box.sandbox_id))),
            "small": seen(box.run_shell_command("echo small")),
        }


def _texts(result: Any) -> dict[str, Any]:
    """A filesystem tool's answer: its error flag and its one text."""
    CallToolResult.model_validate(result)
    return {"isError": result["isError"], "text": result["content"][0]["text"]}


def _filesystem(url: str, token: str) -> dict[str, Any]:
    """FilesystemSandbox's own methods (the MCP filesystem server's tools)."""
    with FilesystemSandbox(base_url=url, bearer_token=token) as box:
        out: dict[str, Any] = {"tools": sorted(box.list_tools().get("filesystem", {}))}
        out["info_version"] = box.get_info()["version"]
        out["mkdir"] = _texts(box.create_directory("/workspace/src/pkg"))
        out["write"] = _texts(
            box.write_file("/workspace/src/pkg/mod.py", "def f():\n    return 1\n")
        )
        box.write_file("src/notes.txt", "alpha\nbeta\n")
        out["read"] = _texts(box.read_file("/workspace/src/notes.txt"))
        out["read_many"] = _texts(box.read_multiple_files(["src/notes.txt", "src/nope.txt"]))
        out["list"] = _texts(box.list_directory("/workspace/src"))
        out["tree"] = _texts(box.directory_tree("/workspace/src"))
        edits = [{"oldText": "return 1", "newText": "return 2"}]
        out["dry"] = _texts(box.edit_file("src/pkg/mod.py", edits, dry_run=True))
        out["after_dry"] = _texts(box.read_file("src/pkg/mod.py"))
        out["edit"] = _texts(box.edit_file("src/pkg/mod.py", edits))
        out["edited"] = _texts(box.read_file("src/pkg/mod.py"))
        out["bad_edit"] = _texts(
            box.edit_file("src/pkg/mod.py", [{"oldText": "zzz", "newText": ""}])
        )
        out["search"] = _texts(box.search_files("/workspace", "**/*.py"))
        out["search_none"] = _texts(box.search_files("/workspace", "*.rs"))
        out["info"] = _texts(box.get_file_info("src/notes.txt"))
        out["move"] = _texts(box.move_file("src/notes.txt", "src/moved.txt"))
        out["move_again"] = _texts(box.move_file("src/pkg/mod.py", "src/moved.txt"))
        out["allowed"] = _texts(box.list_allowed_directories())
        out["missing"] = _texts(box.read_file("nope.txt"))
        out["outside"] = _texts(box.read_file("/etc/passwd"))
        out["shell_sees"] = _tool(box.run_shell_command("cat src/moved.txt src/pkg/mod.py"))
    return out


async def _filesystem_async(url: str, token: str) -> dict[str, Any]:
    async with FilesystemSandboxAsync(base_url=url, bearer_token=token) as box:
        await box.write_file("a/b.txt", "async")
        return {
            "read": _texts(await box.read_file("a/b.txt")),
            "list": _texts(await box.list_directory("a")),
        }


def _routes() -> list[str]:
    """Every ``@remote_wrapper`` route of the runtime's ``SandboxManager`` (method, path)."""
    return sorted(
        f"{m._http_method} {m._path}"
        for _, m in inspect.getmembers(SandboxManager, inspect.isfunction)
        if getattr(m, "_is_remote_wrapper", False)
    )


def main(argv: list[str]) -> None:
    url, token, path = argv
    out = {
        "routes": _routes(),
        "sandbox": _sandbox(url, token),
        "async": asyncio.run(_async_sandbox(url, token)),
        "service": asyncio.run(_service(url, token)),
        "lifecycle": _lifecycle(url, token),
        "lifecycle_async": asyncio.run(_lifecycle_async(url, token)),
        "file_codes": _file_codes(url, token),
        "file_codes_async": asyncio.run(_file_codes_async(url, token)),
        "truncation": _truncation(url, token),
        "filesystem": _filesystem(url, token),
        "filesystem_async": asyncio.run(_filesystem_async(url, token)),
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1:])
