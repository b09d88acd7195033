"""The OpenAI Agents SDK provider without a grid: options, state, mapping of results.

A fake ``AsyncClient`` stands in for the grid here; the same checks against the
real grid are in ``tests/integration/test_openai_agents.py``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox.errors import ExecTimeoutError, InvalidManifestPathError, WorkspaceIOError
from agents.sandbox.manifest import Manifest
from agents.sandbox.session import CallbackSink, Instrumentation
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.sandbox_client import BaseSandboxClientOptions
from agents.sandbox.workspace_paths import SandboxPathGrant

from sandgrid.errors import ErrorCode, InvalidInput, NotFound
from sandgrid.integrations.openai_agents import (
    SandgridSandboxClient,
    SandgridSandboxClientOptions,
    SandgridSandboxSession,
    SandgridSandboxSessionState,
)
from sandgrid.integrations.openai_agents.exec_output import SandgridExecResult
from sandgrid.integrations.openai_agents.session import MAX_DEADLINE_S
from sandgrid.integrations.openai_agents.tars import workspace_tar
from sandgrid.models import ExecResult, Quotas, SessionInfo


class FakeGrid:
    """The few ``AsyncClient`` calls the provider makes, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closed: set[str] = set()
        self.next_exec = ExecResult(exit_code=0, stdout="out", stderr="err")
        self.ceiling: float | None = None

    def _info(self, sid: str, **kw: Any) -> SessionInfo:
        now = datetime.now(UTC)
        state = "closed" if sid in self.closed else "idle"
        return SessionInfo(
            id=sid,
            tenant="t",
            type="python",
            quotas=Quotas(),
            state=state,
            created_at=now,
            last_used=now,
            **kw,
        )

    async def create_session(self, type: str, **kw: Any) -> SessionInfo:
        self.calls.append(("create", kw))
        return self._info(f"s-{len(self.calls):032d}", labels=kw["labels"])

    async def get_session(self, sid: str) -> SessionInfo:
        if sid == "s-unknown":
            raise NotFound("session not found")
        return self._info(sid)

    async def close_session(self, sid: str) -> SessionInfo:
        self.calls.append(("close", sid))
        self.closed.add(sid)
        return self._info(sid)

    async def exec(self, sid: str, argv: list[str], *, timeout_s: float | None) -> ExecResult:
        self.calls.append(("exec", (argv, timeout_s)))
        if timeout_s is not None and self.ceiling is not None and timeout_s > self.ceiling:
            raise InvalidInput(
                "over", context={"field": "timeout_s", "ceiling": self.ceiling, "rule": "<="}
            )
        return self.next_exec

    async def read_file(self, sid: str, path: str, *, binary: bool) -> bytes:
        self.calls.append(("read", path))
        if path == "leak":
            raise InvalidInput("outside", code=ErrorCode.PATH_OUTSIDE_WORKSPACE)
        return b"data"


def _session(grid: FakeGrid, **state: Any) -> SandgridSandboxSession:
    client = SandgridSandboxClient(client=grid)  # type: ignore[arg-type]
    wrapped = asyncio.run(client.create(options=SandgridSandboxClientOptions(**state)))
    inner = wrapped._inner
    assert isinstance(inner, SandgridSandboxSession)
    return inner


def test_options_round_trip_by_their_type() -> None:
    options = SandgridSandboxClientOptions(sandbox_type="python", labels={"a": "b"}, network=True)
    parsed = BaseSandboxClientOptions.parse(options.model_dump(mode="json"))
    assert parsed == options and parsed.type == "sandgrid"


def test_state_keeps_the_grid_id_beside_the_sdk_uuid() -> None:
    grid = FakeGrid()
    s = _session(grid, labels={"run": "1"})
    client = SandgridSandboxClient(client=grid)  # type: ignore[arg-type]
    payload = client.serialize_session_state(s.state)
    assert payload["type"] == "sandgrid" and payload["sandgrid_session_id"] == s.sandgrid_session_id
    back = client.deserialize_session_state(payload)
    assert isinstance(back, SandgridSandboxSessionState)
    assert back.session_id == s.state.session_id and back.labels == {"run": "1"}
    assert grid.calls[0] == (
        "create",
        {"quotas": {"background_processes": 64}, "env": {}, "labels": {"run": "1"}},
    )


def test_network_policy_goes_into_the_quotas() -> None:
    grid = FakeGrid()
    _session(grid, network=True, quotas={"memory_mb": 256})
    assert grid.calls[0][1]["quotas"] == {
        "background_processes": 64,
        "memory_mb": 256,
        "network": True,
    }


def test_exec_maps_output_timeout_and_signal() -> None:
    grid = FakeGrid()
    s = _session(grid, exact_output=False)
    out = asyncio.run(s._exec_internal("echo", Path("x"), timeout=2))
    assert (out.stdout, out.stderr, out.exit_code) == (b"out", b"err", 0)
    assert grid.calls[-1] == ("exec", (["echo", "x"], 2))
    grid.next_exec = ExecResult(exit_code=None, signal=9)
    assert asyncio.run(s._exec_internal("x")).exit_code == 137
    grid.next_exec = ExecResult(exit_code=None, timed_out=True)
    with pytest.raises(ExecTimeoutError):
        asyncio.run(s._exec_internal("sleep", "9", timeout=1))


def test_paths_are_workspace_relative_and_escapes_refused() -> None:
    grid = FakeGrid()
    s = _session(grid)
    assert asyncio.run(s.read(Path("/workspace/a/b.txt"))).read() == b"data"
    assert grid.calls[-1] == ("read", "a/b.txt")
    with pytest.raises(InvalidManifestPathError):
        asyncio.run(s.read(Path("leak")))
    calls = len(grid.calls)
    with pytest.raises(InvalidManifestPathError):
        asyncio.run(s.read(Path("../etc/passwd")))
    assert len(grid.calls) == calls  # refused before any call


def test_resume_reattaches_or_replaces() -> None:
    grid = FakeGrid()
    client = SandgridSandboxClient(client=grid)  # type: ignore[arg-type]
    s = _session(grid)
    live = asyncio.run(client.resume(s.state.model_copy()))
    assert live._inner.state.sandgrid_session_id == s.sandgrid_session_id  # type: ignore[attr-defined]
    asyncio.run(s.shutdown())
    assert ("close", s.sandgrid_session_id) in grid.calls
    replaced = asyncio.run(client.resume(s.state.model_copy()))
    assert replaced._inner.state.sandgrid_session_id != s.sandgrid_session_id  # type: ignore[attr-defined]


def test_keep_on_exit_leaves_the_grid_session_open() -> None:
    grid = FakeGrid()
    s = _session(grid, keep_on_exit=True)
    asyncio.run(s.shutdown())
    assert not [c for c in grid.calls if c[0] == "close"]


def test_persist_skips_the_ephemeral_paths() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name in ("keep.txt", "cache", "cache/x", "cachey.txt"):
            info = tarfile.TarInfo(name)
            if name == "cache":
                info.type = tarfile.DIRTYPE
            t.addfile(info, io.BytesIO(b""))
    with tarfile.open(fileobj=io.BytesIO(workspace_tar(buf.getvalue(), {"cache"}))) as t:
        kept = t.getnames()
    assert kept == ["keep.txt", "cachey.txt"]


def test_the_pty_methods_are_served() -> None:
    assert SandgridSandboxSession.supports_pty(object())  # type: ignore[arg-type]


def test_exec_is_bytes_exact_through_the_wrapper() -> None:
    grid = FakeGrid()
    s = _session(grid)
    raw = bytes(range(256)) + "é".encode()
    grid.next_exec = ExecResult(
        exit_code=0, stdout=base64.b64encode(raw).decode() + "\n", stderr=""
    )
    out = asyncio.run(s._exec_internal("cat", "blob"))
    assert out.stdout == raw and out.stderr == b""
    sent = grid.calls[-1][1][0]
    assert sent[:2] == ["sh", "-c"] and sent[-2:] == ["cat", "blob"]


def test_a_cut_output_is_flagged_and_said() -> None:
    grid = FakeGrid()
    s = _session(grid)
    full = base64.b64encode(b"x" * 100).decode()
    grid.next_exec = ExecResult(exit_code=0, stdout=full[:50], stdout_truncated=True)
    out = asyncio.run(s._exec_internal("yes"))
    assert isinstance(out, SandgridExecResult)
    assert out.stdout_truncated and not out.stderr_truncated
    assert out.stdout == b"x" * 36  # the whole base64 groups before the cut
    assert b"stdout truncated" in out.stderr


def test_timeout_none_is_the_tenants_longest_deadline() -> None:
    grid = FakeGrid()
    s = _session(grid, exact_output=False)
    asyncio.run(s._exec_internal("sleep", "40"))
    assert grid.calls[-1][1][1] == MAX_DEADLINE_S  # not the session's 30 s default
    grid.ceiling = 600
    asyncio.run(s._exec_internal("sleep", "40"))
    assert [c[1][1] for c in grid.calls[-2:]] == [MAX_DEADLINE_S, 600]
    asyncio.run(s._exec_internal("sleep", "40"))
    assert grid.calls[-1][1][1] == 600  # learnt once
    with pytest.raises(ExecTimeoutError):
        grid.next_exec = ExecResult(exit_code=None, timed_out=True)
        asyncio.run(s._exec_internal("sleep", "9"))


def test_an_extra_path_grant_is_a_clear_sdk_error() -> None:
    grid = FakeGrid()
    client = SandgridSandboxClient(client=grid)  # type: ignore[arg-type]
    manifest = Manifest(extra_path_grants=(SandboxPathGrant(path="/tmp"),))
    wrapped = asyncio.run(client.create(manifest=manifest, options=SandgridSandboxClientOptions()))
    with pytest.raises(WorkspaceIOError, match="outside /workspace"):
        asyncio.run(wrapped.read(Path("/tmp/x")))
    with pytest.raises(WorkspaceIOError, match="extra_path_grants are not served"):
        asyncio.run(wrapped.write(Path("/tmp/x"), io.BytesIO(b"x")))


def test_a_file_over_the_json_limit_is_read_through_the_tar() -> None:
    grid = FakeGrid()
    s = _session(grid)
    big = b"y" * 1000
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("big.bin")
        info.size = len(big)
        t.addfile(info, io.BytesIO(big))

    async def read_file(sid: str, path: str, *, binary: bool) -> bytes:
        raise InvalidInput("too big", code=ErrorCode.PAYLOAD_TOO_LARGE)

    async def download_tar(sid: str, path: str) -> bytes:
        grid.calls.append(("tar", path))
        return buf.getvalue()

    grid.read_file = read_file  # type: ignore[method-assign]
    grid.download_tar = download_tar  # type: ignore[attr-defined]
    assert asyncio.run(s.read(Path("big.bin"))).read() == big
    assert grid.calls[-1] == ("tar", "big.bin")


def test_the_client_takes_instrumentation_and_dependencies() -> None:
    grid = FakeGrid()
    events: list[object] = []
    deps = Dependencies()
    client = SandgridSandboxClient(
        client=grid,  # type: ignore[arg-type]
        instrumentation=Instrumentation(sinks=[CallbackSink(lambda e, _s: events.append(e))]),
        dependencies=deps,
    )
    wrapped = asyncio.run(client.create(options=SandgridSandboxClientOptions(exact_output=False)))
    asyncio.run(wrapped.exec("true"))
    assert events  # the sink saw the exec
    assert wrapped.dependencies is not deps  # a clone per session, as the SDK's clients do
