"""The OpenAI Agents SDK provider against the real grid (API, two workers, Docker).

Modelled on the checks of the SDK's own sandbox integration tests: a path
leaving the workspace is refused (lexically and through a symlink), a persisted
and hydrated tree is identical, exec honours its timeout, and a session resumes
after its owning worker is killed (and, once closed, from its SDK snapshot).
The tests drive the client directly; no model is called.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agents.sandbox import LocalSnapshotSpec
from agents.sandbox.errors import ExecTimeoutError, InvalidManifestPathError
from agents.sandbox.session.sandbox_session import SandboxSession

from sandgrid.client import AsyncClient, Client
from sandgrid.integrations.openai_agents import (
    SandgridSandboxClient,
    SandgridSandboxClientOptions,
    SandgridSandboxSession,
)
from tests.support.grid_fixtures import NODES, TOKEN, BatchGrid, batch_grid  # noqa: F401

pytestmark = pytest.mark.integration

T = TypeVar("T")
OPTIONS = SandgridSandboxClientOptions(labels={"test": "openai-agents"})


def _run(grid: BatchGrid, body: Callable[[SandgridSandboxClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with AsyncClient(grid.api_url, TOKEN) as sdk:
            return await body(SandgridSandboxClient(client=sdk))

    return asyncio.run(main())


def _grid_id(session: SandboxSession) -> str:
    inner = session._inner
    assert isinstance(inner, SandgridSandboxSession)
    return inner.sandgrid_session_id


def _tree(tar: bytes) -> dict[str, tuple[str, int, str]]:
    """Each member: its type, mode and content hash (or link target)."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        for m in t.getmembers():
            f = t.extractfile(m) if m.isfile() else None
            digest = hashlib.sha256(f.read()).hexdigest() if f else m.linkname
            kind = "f" if m.isfile() else "d" if m.isdir() else "l" if m.issym() else "?"
            out[m.name.removeprefix("./")] = (kind, m.mode, digest)
    return out


@pytest.fixture
def grid(batch_grid: BatchGrid) -> Iterator[BatchGrid]:  # noqa: F811
    yield batch_grid


def test_workspace_escape_is_blocked(grid: BatchGrid) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(options=OPTIONS) as s:
            for bad in ("../outside.txt", "/etc/passwd"):
                with pytest.raises(InvalidManifestPathError):
                    await s.write(Path(bad), io.BytesIO(b"x"))
            with pytest.raises(InvalidManifestPathError):
                await s.read(Path("../../etc/passwd"))
            made = await s.exec("ln -s /etc/passwd leak && ln -s /tmp out")
            assert made.ok(), made.stderr
            with pytest.raises(InvalidManifestPathError):
                await s.read(Path("leak"))
            with pytest.raises(InvalidManifestPathError):
                await s.write(Path("out/planted"), io.BytesIO(b"x"))
            assert (await s.exec("test -e /tmp/planted")).exit_code == 1

    _run(grid, body)


def test_persisted_and_hydrated_tree_is_identical(grid: BatchGrid) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(options=OPTIONS) as a:
            await a.write(Path("src/app.py"), io.BytesIO(b"print('hi')\n"))
            await a.write(Path("data/blob.bin"), io.BytesIO(bytes(range(256)) * 64))
            made = await a.exec("mkdir -p empty/deep && chmod 755 src/app.py && ln -s src/app.py l")
            assert made.ok(), made.stderr
            archive = (await a.persist_workspace()).read()
        async with await client.create(options=OPTIONS) as b:
            await b.hydrate_workspace(io.BytesIO(archive))
            again = (await b.persist_workspace()).read()
            assert (await b.read(Path("src/app.py"))).read() == b"print('hi')\n"
        tree = _tree(archive)
        assert {"src/app.py", "data/blob.bin", "empty/deep", "l"} <= set(tree)
        assert not any(name.startswith(("workspace", "/")) for name in tree)  # workspace-relative
        assert _tree(again) == tree

    _run(grid, body)


def test_exec_honours_its_timeout(grid: BatchGrid) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(options=OPTIONS) as s:
            with pytest.raises(ExecTimeoutError) as caught:
                await s.exec("sleep 30", timeout=1)
            assert caught.value.timeout_s == 1
            after = await s.exec("echo", "still", "here", shell=False)
            assert (after.exit_code, after.stdout) == (0, b"still here\n")
            failed = await s.exec("exit 3")
            assert failed.exit_code == 3 and not failed.ok()

    _run(grid, body)


def test_pty_methods_run_beside_execs(grid: BatchGrid) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(options=OPTIONS) as s:
            assert s.supports_pty()
            done = await s.pty_exec_start("echo ready; exit 4", yield_time_s=5)
            assert (done.process_id, done.output, done.exit_code) == (None, b"ready\n", 4)
            cat = await s.pty_exec_start("cat", yield_time_s=0.2)
            assert cat.process_id is not None and cat.exit_code is None
            assert (await s.exec("echo", "meanwhile", shell=False)).stdout == b"meanwhile\n"
            echoed = await s.pty_write_stdin(
                session_id=cat.process_id, chars="hello\n", yield_time_s=1
            )
            assert echoed.output == b"hello\n" and echoed.process_id == cat.process_id
            again = await s.pty_write_stdin(session_id=cat.process_id, chars="", yield_time_s=0.2)
            assert again.output == b""  # nothing repeated
            await s.pty_terminate_all()
            assert (await s.exec("pgrep -x cat")).exit_code == 1

    _run(grid, body)


def test_resume_after_the_owning_worker_is_killed(grid: BatchGrid) -> None:
    keep = SandgridSandboxClientOptions(keep_on_exit=True)

    async def first(client: SandgridSandboxClient) -> tuple[dict[str, Any], str]:
        s = await client.create(options=keep)
        await s.start()
        await s.write(Path("notes.txt"), io.BytesIO(b"kept across workers\n"))
        assert (await s.exec("cat notes.txt")).ok()
        return client.serialize_session_state(s.state), _grid_id(s)

    payload, sid = _run(grid, first)
    with Client(grid.api_url, TOKEN) as sdk:
        owner = sdk.get_session(sid).owner
    assert owner in NODES
    grid.grid.kill(owner)
    grid.grid.wait(lambda: owner not in grid.grid.workers_seen(), f"{owner} to be gone")

    async def resumed(client: SandgridSandboxClient) -> bytes:
        s = await client.resume(client.deserialize_session_state(payload))
        assert _grid_id(s) == sid  # re-attached, not replaced
        async with s:
            out = await s.exec("cat notes.txt")
        await client.delete(s)
        return out.stdout

    try:
        assert _run(grid, resumed) == b"kept across workers\n"
    finally:
        grid.grid.start_worker(owner, types="python,bfcl,appworld", concurrency=2)
        grid.grid.wait(lambda: owner in grid.grid.workers_seen(), f"{owner} back")


def test_resume_of_a_closed_session_restores_its_snapshot(grid: BatchGrid, tmp_path: Path) -> None:
    spec = LocalSnapshotSpec(base_path=tmp_path)

    async def body(client: SandgridSandboxClient) -> None:
        s = await client.create(snapshot=spec, options=OPTIONS)
        async with s:
            await s.write(Path("result.txt"), io.BytesIO(b"42\n"))
        payload = client.serialize_session_state(s.state)
        old = _grid_id(s)
        assert not await s.running()  # shut down: the grid session is closed
        back = await client.resume(client.deserialize_session_state(payload))
        assert _grid_id(back) != old
        async with back:
            assert (await back.read(Path("result.txt"))).read() == b"42\n"

    _run(grid, body)
