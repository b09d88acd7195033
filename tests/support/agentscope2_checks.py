"""AgentScope 2.0's own checks of a backend and a workspace, run against a real grid.

Run by ``tests/integration/test_agentscope2.py`` with the python of a venv that
has ``agentscope[service]`` 2.0 (``python agentscope2_checks.py API TOKEN TYPE OUT``),
so this module imports only the standard library and the sandgrid SDK at the
top; ``agentscope`` is imported in ``main``. The checks are written anew from what
AgentScope's ``tests/backend_local_test.py``, ``backend_docker_test.py`` and
``workspace_docker_test.py`` assert of a backend and a workspace, plus the
grid's limits (output cap, size caps, deadline ceiling, concurrent calls). Each
check's outcome (``"ok"`` or what failed) is written as JSON to ``OUT``; the test
module reads ``CHECKS`` for their names.
"""

from __future__ import annotations

import asyncio
import errno
import json
import sys
import tempfile
import traceback
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["CEILING_S", "CHECKS", "Ctx", "main"]

CEILING_S = 600.0
"""The test tenant's longest deadline (``max_timeout_s``)."""

W = "/workspace"
Check = Callable[["Ctx"], Awaitable[None]]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__.removeprefix("check_")] = fn
    return fn


class Ctx:
    """What a check gets: the backend on a fresh session, and ways to make more."""

    def __init__(self, client: Any, kind: str, mods: Any) -> None:
        self.client, self.kind, self.m = client, kind, mods
        self.sessions: list[str] = []
        self.backend: Any = None

    async def open(self, **quotas: Any) -> Any:
        """A backend on a new session of this run's type (closed after the check)."""
        info = await self.client.create_session(self.kind, quotas=quotas or None)
        self.sessions.append(info.id)
        return self.m.SandgridBackend(self.client, info.id, max_timeout_s=CEILING_S)

    async def close(self) -> None:
        for sid in self.sessions:
            await self.client.close_session(sid)

    def workspace(self, **kw: Any) -> Any:
        return self.m.SandgridWorkspace(client=self.client, sandbox_type=self.kind, **kw)


def eq(got: Any, want: Any, what: str = "") -> None:
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


async def raises(kind: type[BaseException], call: Awaitable[Any]) -> BaseException:
    try:
        await call
    except kind as exc:
        return exc
    raise AssertionError(f"no {kind.__name__} raised")


# ---- exec (backend_local_test / backend_docker_test) -------------------------------


@check
async def check_exec_returns_stdout(c: Ctx) -> None:
    r = await c.backend.exec_shell(["echo", "hello world"])
    assert isinstance(r, c.m.ExecResult) and r.ok(), r
    eq(r.stdout, b"hello world\n", "stdout")


@check
async def check_exec_nonzero_exit_is_a_result(c: Ctx) -> None:
    r = await c.backend.exec_shell(["sh", "-c", "echo oops >&2; exit 4"])
    eq(r.exit_code, 4, "exit")
    assert b"oops" in r.stderr, r


@check
async def check_exec_argv_not_shell_split(c: Ctx) -> None:
    tricky = "a b $(echo x) | ; 'q' \"d\""
    r = await c.backend.exec_shell(["echo", tricky])
    eq(r.stdout.rstrip(b"\n"), tricky.encode(), "stdout")


@check
async def check_exec_cwd_default_is_workdir(c: Ctx) -> None:
    eq((await c.backend.exec_shell(["pwd"])).stdout.strip(), W.encode(), "pwd")
    eq(await c.backend.getcwd(), W, "getcwd")


@check
async def check_exec_cwd_is_respected(c: Ctx) -> None:
    eq((await c.backend.exec_shell(["pwd"], cwd="/tmp")).stdout.strip(), b"/tmp", "/tmp")
    await c.backend.exec_shell(["mkdir", "-p", "sub/deeper"])
    eq((await c.backend.exec_shell(["pwd"], cwd="sub")).stdout.strip(), b"/workspace/sub", "rel")
    missing = await c.backend.exec_shell(["pwd"], cwd="/nope")
    eq(missing.exit_code, 127, "missing cwd")


@check
async def check_missing_executable_returns_127(c: Ctx) -> None:
    eq((await c.backend.exec_shell(["no-such-program-xyz"])).exit_code, 127, "exit")


@check
async def check_timeout_returns_minus_one(c: Ctx) -> None:
    r = await c.backend.exec_shell(["sleep", "10"], timeout=1)
    eq((r.exit_code, r.stderr), (-1, b"timed out"), "timeout")


@check
async def check_timeout_none_is_the_tenant_ceiling(c: Ctx) -> None:
    r = await c.backend.exec_shell(["sh", "-c", "sleep 1; echo done"], timeout=None)
    eq((r.exit_code, r.stdout), (0, b"done\n"), "timeout=None")
    over = c.m.SandgridBackend(c.client, c.backend.session_id)  # 3600 s: over the ceiling
    held = await over.exec_shell(["echo", "held"], timeout=CEILING_S + 100)
    eq((held.exit_code, held.stdout), (0, b"held\n"), "over the ceiling")
    eq(over.calls.max_timeout_s, CEILING_S, "the ceiling learnt")


@check
async def check_sh_c_pipeline_and_chain(c: Ctx) -> None:
    r = await c.backend.exec_shell(["sh", "-c", "printf 'a\\nb\\nc\\n' | wc -l"])
    eq(r.stdout.strip(), b"3", "pipeline")
    r = await c.backend.exec_shell(["sh", "-c", "true && echo yes || echo no"])
    eq(r.stdout, b"yes\n", "chain")


@check
async def check_exec_output_is_bytes_exact(c: Ctx) -> None:
    r = await c.backend.exec_shell(["printf", "\\000\\377\\342\\202"])
    eq(r.stdout, b"\x00\xff\xe2\x82", "binary stdout")
    r = await c.backend.exec_shell(["sh", "-c", "printf '\\351t\\351' >&2"])
    eq(r.stderr, b"\xe9t\xe9", "latin-1 stderr")


@check
async def check_output_over_the_cap_is_reported(c: Ctx) -> None:
    small = await c.open(output_bytes=64 * 1024)
    r = await small.exec_shell(["head", "-c", "200000", "/dev/zero"])
    eq(r.exit_code, 0, "exit")
    assert 0 < len(r.stdout) < 200000 and set(r.stdout) == {0}, len(r.stdout)
    assert b"stdout cut at the session's output cap" in r.stderr, r.stderr


@check
async def check_concurrent_calls_in_one_session(c: Ctx) -> None:
    argvs = [["sh", "-c", f"sleep 1; echo {i}"] for i in range(4)]
    results = await asyncio.gather(*(c.backend.exec_shell(a) for a in argvs))
    eq([r.stdout for r in results], [f"{i}\n".encode() for i in range(4)], "outputs")


# ---- files ---------------------------------------------------------------------------


@check
async def check_write_then_read_roundtrip(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/roundtrip.txt", b"hello\nworld\n")
    eq(await c.backend.read_file(f"{W}/roundtrip.txt"), b"hello\nworld\n", "read")
    eq(await c.backend.read_file("roundtrip.txt"), b"hello\nworld\n", "relative read")


@check
async def check_write_creates_parent_dirs(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/a/b/c/file.txt", b"x")
    eq(await c.backend.read_file(f"{W}/a/b/c/file.txt"), b"x", "read")


@check
async def check_write_preserves_binary_and_crlf(c: Ctx) -> None:
    payload = b"a\r\nb\x00\xffc\r"
    await c.backend.write_file(f"{W}/bin.dat", payload)
    eq(await c.backend.read_file(f"{W}/bin.dat"), payload, "read")
    eq((await c.backend.exec_shell(["wc", "-c", "bin.dat"])).stdout.split()[0], b"8", "size")


@check
async def check_read_missing_file_raises(c: Ctx) -> None:
    exc = await raises(FileNotFoundError, c.backend.read_file(f"{W}/nope.txt"))
    eq(getattr(exc, "errno", None), errno.ENOENT, "errno")
    await raises(FileNotFoundError, c.backend.read_file("/tmp/nope.txt"))


@check
async def check_read_directory_raises(c: Ctx) -> None:
    await c.backend.exec_shell(["mkdir", "-p", "adir"])
    await raises(IsADirectoryError, c.backend.read_file(f"{W}/adir"))
    await raises(IsADirectoryError, c.backend.read_file("/tmp"))
    await raises(IsADirectoryError, c.backend.write_file(f"{W}/adir", b"x"))


@check
async def check_files_outside_the_workspace(c: Ctx) -> None:
    payload = bytes(range(256)) * 64
    await c.backend.write_file("/tmp/out/side.bin", payload)
    eq(await c.backend.read_file("/tmp/out/side.bin"), payload, "read")
    eq((await c.backend.exec_shell(["cat", "/tmp/out/side.bin"])).stdout, payload, "cat")


@check
async def check_size_caps_raise_efbig(c: Ctx) -> None:
    big = 16 * 1024 * 1024 + 1
    await c.backend.exec_shell(["sh", "-c", f"head -c {big} /dev/zero > made.bin"])
    exc = await raises(OSError, c.backend.read_file(f"{W}/made.bin"))
    eq(getattr(exc, "errno", None), errno.EFBIG, "read over 16 MiB")
    exc = await raises(OSError, c.backend.write_file("/tmp/big.bin", b"\0" * (1 << 20)))
    eq(getattr(exc, "errno", None), errno.EFBIG, "write outside /workspace over the stdin cap")


# ---- the derived helpers (BackendBase's own, over exec_shell) -----------------------


@check
async def check_file_exists_and_is_dir(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/f.txt", b"x")
    b = c.backend
    got = [await b.file_exists(f"{W}/f.txt"), await b.file_exists(W), await b.is_dir(W)]
    got += [await b.is_dir(f"{W}/f.txt"), await b.file_exists(f"{W}/missing")]
    eq(got, [True, True, True, False, False], "exists/is_dir")


@check
async def check_list_dir_and_scandir(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/listing/a.txt", b"xy")
    await c.backend.write_file(f"{W}/listing/sub/nested.txt", b"x")
    eq(sorted(await c.backend.list_dir(f"{W}/listing")), ["a.txt", "sub"], "shallow")
    deep = await c.backend.list_dir(f"{W}/listing", recursive=True)
    eq(sorted(p.rsplit("/", 1)[-1] for p in deep), ["a.txt", "nested.txt"], "recursive")
    entries = {e.name: e for e in await c.backend.scandir(f"{W}/listing")}
    eq((entries["a.txt"].is_dir, entries["a.txt"].size_bytes), (False, 2), "file entry")
    eq((entries["sub"].is_dir, entries["sub"].size_bytes), (True, None), "dir entry")
    eq(await c.backend.scandir(f"{W}/missing"), [], "missing dir")


@check
async def check_stat_and_mtime(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/stat.txt", b"abc")
    st = await c.backend.stat(f"{W}/stat.txt")
    eq((st.name, st.is_dir, st.size_bytes), ("stat.txt", False, 3), "stat")
    assert isinstance(await c.backend.stat_mtime(f"{W}/stat.txt"), float)
    eq(await c.backend.stat(f"{W}/missing"), None, "missing stat")
    eq(await c.backend.stat_mtime(f"{W}/missing"), None, "missing mtime")


@check
async def check_read_stream_chunks(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/s.bin", b"0123456789")
    chunks = [x async for x in c.backend.read_stream(f"{W}/s.bin", chunk_size=4)]
    eq(chunks, [b"0123", b"4567", b"89"], "chunks")
    await c.backend.write_file(f"{W}/empty", b"")
    eq(await c.backend.read_file(f"{W}/empty"), b"", "empty file")
    eq([x async for x in c.backend.read_stream(f"{W}/empty")], [], "empty stream")


@check
async def check_delete_path(c: Ctx) -> None:
    await c.backend.write_file(f"{W}/tree/deep/f.txt", b"x")
    await c.backend.delete_path(f"{W}/tree")
    eq(await c.backend.file_exists(f"{W}/tree"), False, "deleted")
    await c.backend.delete_path(f"{W}/missing")


# ---- the builtin tools through a workspace (workspace_docker_test) -------------------


async def _text(out: Any) -> str:
    chunks = [out] if not hasattr(out, "__aiter__") else [x async for x in out]
    return "".join(getattr(b, "text", "") for ch in chunks for b in ch.content)


@check
async def check_workspace_lifecycle_and_tools(c: Ctx) -> None:
    ws = c.workspace()
    await ws.initialize()
    await ws.initialize()  # idempotent
    try:
        sid = ws.session_id
        info = await c.client.get_session(sid)
        eq(info.labels.get("agentscope.workspace.id"), ws.workspace_id, "label")
        for d in ("data", "skills", "sessions"):
            assert await ws.get_backend().is_dir(f"{W}/{d}"), d
        assert W in await ws.get_instructions()
        tools = {type(t).__name__: t for t in await ws.list_tools()}
        eq(sorted(tools), ["Bash", "Edit", "Glob", "Grep", "Read", "Write"], "tools")
        assert all(isinstance(t._backend, c.m.SandgridBackend) for t in tools.values())
        await _text(await tools["Write"](file_path=f"{W}/t.txt", content="one\ntwo\n"))
        assert "two" in await _text(await tools["Read"](file_path=f"{W}/t.txt"))
        assert "sandgrid-bash" in await _text(await tools["Bash"](command="echo sandgrid-bash"))
        late = await _text(await tools["Bash"](command="sleep 5", timeout=1000))
        assert "Command timed out after 1000ms" in late, late  # Bash reads -1, b"timed out"
        edit = tools["Edit"](file_path=f"{W}/t.txt", old_string="two", new_string="three")
        await _text(await edit)
        eq(await ws.get_backend().read_file(f"{W}/t.txt"), b"one\nthree\n", "edited")
        found = await _text(await tools["Glob"](pattern="*.txt", path=W))
        assert f"{W}/t.txt" in found, found
        hits = await _text(await tools["Grep"](pattern="thr+ee", path=W))  # rg in the image
        assert "t.txt" in hits and "ripgrep error" not in hits, hits
        none = await _text(await tools["Grep"](pattern="two", path=W))
        assert "No matches found" in none, none
        eq(await ws.list_mcps(), [], "no MCPs")
    finally:
        await ws.close()
    eq(ws.is_alive, False, "closed")
    eq((await c.client.get_session(sid)).state, "closed", "session closed")


@check
async def check_workspace_offload_and_reattach(c: Ctx) -> None:
    wid = f"t-{uuid.uuid4().hex[:8]}"
    ws = c.workspace(workspace_id=wid, keep_on_close=True)
    await ws.initialize()
    block = c.m.ToolResultBlock(
        id="tool_1", name="t", output="Tool execution successful!", state=c.m.SUCCESS
    )
    path = await ws.offload_tool_result("s1", block)
    eq(path, f"{W}/sessions/s1/tool_result-tool_1.txt", "offload path")
    sid = ws.session_id
    await ws.close()
    again = c.workspace(workspace_id=wid)
    await again.initialize()
    try:
        eq(again.session_id, sid, "re-attached")
        eq(await again.get_backend().read_file(path), b"Tool execution successful!", "kept")
    finally:
        await again.close()


@check
async def check_workspace_skills_and_mcp_refusal(c: Ctx) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        skill = Path(tmp, "grid_skill")
        skill.mkdir()
        (skill / "SKILL.md").write_text("---\nname: grid_skill\ndescription: On the grid\n---\n")
        (skill / "tool.py").write_text("def t():\n    return 1\n")
        ws = c.workspace(skill_paths=[str(skill)])
        await ws.initialize()
    try:
        skills = await ws.list_skills()
        eq([(s.name, s.description) for s in skills], [("grid_skill", "On the grid")], "skills")
        eq(skills[0].dir, f"{W}/skills/default/grid_skill", "skill dir")
        stdio = c.m.MCPClient(
            name="local", is_stateful=True, mcp_config={"type": "stdio_mcp", "command": "true"}
        )
        exc = await raises(ValueError, ws.add_mcp(stdio))
        assert "stdio" in str(exc), exc
    finally:
        await ws.close()


@check
async def check_manager_hands_out_one_workspace_per_id(c: Ctx) -> None:
    manager = c.m.SandgridWorkspaceManager(c.client, sandbox_type=c.kind)
    async with manager:
        a, b = await asyncio.gather(
            manager.get_workspace("u", "agent", "s1"), manager.get_workspace("u", "agent", "s2")
        )
        assert a is b, (a, b)
        await a.get_backend().write_file(f"{W}/kept.txt", b"kept")
        sid = a.session_id
        await manager.close(a.workspace_id)
        again = await manager.get_workspace("u", "agent", "s3")
        eq(again.session_id, sid, "same session")
        eq(await again.get_backend().read_file(f"{W}/kept.txt"), b"kept", "files kept")
    await c.client.close_session(sid)


@check
async def check_exports_are_the_public_names(c: Ctx) -> None:
    from tests.support.exports import check_exports  # needs pytest: in the venv for this

    package = "sandgrid.integrations.agentscope"
    for name in (package, f"{package}.backend", f"{package}.workspace", f"{package}.manager"):
        check_exports(name)


# ---- the runner ----------------------------------------------------------------------


class _Mods:
    """The classes the checks use, imported where agentscope is installed."""

    def __init__(self) -> None:
        from agentscope.mcp import MCPClient
        from agentscope.message import ToolResultBlock
        from agentscope.tool import ExecResult

        from sandgrid.integrations.agentscope import SandgridBackend, SandgridWorkspace
        from sandgrid.integrations.agentscope.manager import SandgridWorkspaceManager

        self.MCPClient, self.ToolResultBlock = MCPClient, ToolResultBlock
        self.ExecResult = ExecResult
        self.SandgridBackend, self.SandgridWorkspace = SandgridBackend, SandgridWorkspace
        self.SandgridWorkspaceManager = SandgridWorkspaceManager
        self.SUCCESS = _success_state()


def _success_state() -> Any:
    from agentscope.message import ToolResultState

    return ToolResultState.SUCCESS


async def _run_all(api: str, token: str, kind: str) -> dict[str, str]:
    from sandgrid.client import AsyncClient

    mods, results = _Mods(), {}
    async with AsyncClient(api, token, timeout=120) as client:
        for name, fn in CHECKS.items():
            ctx = Ctx(client, kind, mods)
            try:
                ctx.backend = await ctx.open()
                await fn(ctx)
                results[name] = "ok"
            except Exception:  # every failure is reported; the other checks still run
                results[name] = traceback.format_exc(limit=6)
            finally:
                await ctx.close()
    return results


def main(argv: list[str]) -> int:
    api, token, kind, out = argv
    Path(out).write_text(json.dumps(asyncio.run(_run_all(api, token, kind)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
