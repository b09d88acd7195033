"""The OpenAI Agents SDK's own sandbox checks, against ``SandgridSandboxClient`` on a real grid.

Written from what the SDK's ``tests/sandbox/`` asserts of a client (its
UnixLocal and Docker session tests, the shell capability's tests, the runner
pause/resume integration test with ``agents.testing``'s scripted model), run
on runc and on runsc. A grid of its own: the API and one worker serving
``python`` and ``python-gvisor``; its tenant's longest deadline is 600 s, so
``timeout=None`` has a ceiling to learn. No model is called: the scripted
model plays the turns. What cannot apply is in docs/integrations.md.

Checks marked ``NEEDS_PARALLEL_TURNS`` run two calls in one session at once
(the SDK applies up to four manifest entries together; two ``exec_command``
calls in one model turn): they need issue 20's item 1 (``max_parallel_turns``)
and fail with 409 ``session_busy`` before it.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agents import RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.run_state import RunState
from agents.sandbox import (
    LocalSnapshotSpec,
    Manifest,
    RemoteSnapshotSpec,
    SandboxAgent,
    SandboxRunConfig,
)
from agents.sandbox.capabilities import Shell
from agents.sandbox.entries import Dir, File
from agents.sandbox.errors import (
    ExecTimeoutError,
    InvalidManifestPathError,
    PtySessionNotFoundError,
    WorkspaceIOError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session import CallbackSink, Instrumentation, SandboxSessionEvent
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.util.tar_utils import validate_tar_bytes
from agents.sandbox.workspace_paths import SandboxPathGrant
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from sandgrid.client import AsyncClient
from sandgrid.integrations.openai_agents import (
    SandgridSandboxClient,
    SandgridSandboxClientOptions,
)
from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.support.redis_db import fresh_db

pytestmark = pytest.mark.integration

T = TypeVar("T")
PORT = int(os.environ.get("SANDGRID_TEST_OPENAI_API_PORT", "8741"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-openaisdk-" + "o" * 24
CEILING_S = 600.0
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]
F = TypeVar("F", bound=Callable[..., None])


def NEEDS_PARALLEL_TURNS(test: F) -> F:
    """Marks a check that runs calls of one session at once (issue 20's item 1)."""
    test.__doc__ = (test.__doc__ or "") + " Needs concurrent turns in one session (20.1)."
    return test


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    """The API and one worker; the tenant's longest deadline is ``CEILING_S``."""
    r = fresh_db(REDIS_URL)
    tenant = Tenant(name="sdk", limits=TenantLimits(max_timeout_s=CEILING_S))
    r.hset(names.tokens_key(), hash_token(TOKEN), tenant.model_dump_json())
    env = {"SANDGRID_WORKER__POOL_SIZE": "1", "SANDGRID_WORKER__SNAPSHOT_STORE": "local"}
    where = tmp_path_factory.mktemp("openaigrid") / "grid"
    g = LocalGrid(where, port=PORT, redis_url=REDIS_URL, tenants={}, env=env)
    try:
        g.start(["sdk-w1"], types="python,python-gvisor", concurrency=2)
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


@pytest.fixture(params=RUNTIMES)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _run(grid: LocalGrid, body: Callable[[SandgridSandboxClient], Awaitable[T]], **kw: Any) -> T:
    async def main() -> T:
        async with AsyncClient(grid.api_url, TOKEN) as sdk:
            return await body(SandgridSandboxClient(client=sdk, **kw))

    return asyncio.run(main())


def _in_session(
    grid: LocalGrid, kind: str, body: Callable[[SandboxSession], Awaitable[None]], **quotas: Any
) -> None:
    """Run ``body`` in a new session of ``kind`` (closed at its end)."""

    async def main(client: SandgridSandboxClient) -> None:
        async with await client.create(options=_options(kind, **quotas)) as s:
            await body(s)

    _run(grid, main)


def _options(kind: str, **quotas: Any) -> SandgridSandboxClientOptions:
    return SandgridSandboxClientOptions(
        sandbox_type=kind, quotas=quotas, labels={"test": "openai-sdk-suite"}
    )


# -- exec (UnixLocal / Docker session checks) ---------------------------------------------


def test_exec_output_is_bytes_exact_and_a_cut_is_said(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        raw = await s.exec("printf '\\377\\000\\376caf\\303\\251'; printf '\\200' >&2")
        assert (raw.stdout, raw.stderr, raw.exit_code) == (
            b"\xff\x00\xfecaf\xc3\xa9",
            b"\x80",
            0,
        )
        failed = await s.exec("echo out; echo err >&2; exit 7")
        assert (failed.stdout, failed.stderr, failed.exit_code) == (b"out\n", b"err\n", 7)
        plain = await s.exec("printf", "%s|", "a b", "c", shell=False)
        assert plain.stdout == b"a b|c|"
        big = await s.exec("head -c 200000 /dev/zero")
        assert 0 < len(big.stdout) < 200000 and set(big.stdout) == {0}
        assert getattr(big, "stdout_truncated", False)
        assert b"stdout truncated" in big.stderr  # never cut silently

    _in_session(grid, kind, body, output_bytes=64 << 10)


def test_timeouts_and_timeout_none(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        with pytest.raises(ExecTimeoutError) as caught:
            await s.exec("sleep 30", timeout=1)
        assert caught.value.timeout_s == 1
        slow = await s.exec("sleep 4; echo done")  # past the session's 2 s default
        assert (slow.exit_code, slow.stdout) == (0, b"done\n")

    _in_session(grid, kind, body, timeout_s=2)


# -- files --------------------------------------------------------------------------------


def test_files_round_trip_and_their_errors(grid: LocalGrid, kind: str, tmp_path: Path) -> None:
    big = os.urandom(17 << 20)
    grant = Manifest(extra_path_grants=(SandboxPathGrant(path="/tmp"),))

    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(manifest=grant, options=_options(kind)) as s:
            await s.write(Path("bin/all.bin"), io.BytesIO(bytes(range(256))))
            assert (await s.read(Path("bin/all.bin"))).read() == bytes(range(256))
            await s.write(Path("big.bin"), io.BytesIO(big))
            assert (await s.read(Path("big.bin"))).read() == big  # over the 16 MiB JSON read
            with pytest.raises(WorkspaceReadNotFoundError):
                await s.read(Path("missing.txt"))
            with pytest.raises(InvalidManifestPathError):
                await s.read(Path("../../etc/passwd"))
            with pytest.raises(WorkspaceIOError, match="outside /workspace"):
                await s.read(Path("/tmp/granted.txt"))

    _run(grid, body)


def test_persisted_links_pass_the_sdks_hydrate_check(grid: LocalGrid, kind: str) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(options=_options(kind)) as a:
            made = await a.exec(
                "mkdir -p src d && echo hi > src/app.py && ln -s /workspace/src/app.py d/abs"
                " && ln -s ../src/app.py d/rel"
            )
            assert made.ok(), made.stderr
            archive = (await a.persist_workspace()).read()
        validate_tar_bytes(archive, allow_external_symlink_targets=False)
        async with await client.create(options=_options(kind)) as b:
            await b.hydrate_workspace(io.BytesIO(archive))
            again = await b.exec("cat d/abs d/rel && readlink d/abs")
            assert again.stdout == b"hi\nhi\n../src/app.py\n"

    _run(grid, body)


# -- PTY processes ------------------------------------------------------------------------


def test_pty_pipes_poll_and_unknown_sessions(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        started = await s.pty_exec_start(
            "sh", "-c", "printf 'stdout\\n'; printf 'stderr\\n' >&2; sleep 1",
            shell=False, yield_time_s=0.05,
        )  # fmt: skip
        assert started.process_id is not None and started.exit_code is None
        done = await s.pty_write_stdin(session_id=started.process_id, chars="", yield_time_s=5.5)
        text = (started.output + done.output).decode()
        assert "stdout" in text and "stderr" in text
        assert (done.process_id, done.exit_code) == (None, 0)
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=started.process_id, chars="")
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=999_999, chars="")

    _in_session(grid, kind, body)


def test_pty_split_utf8_and_max_output_tokens(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        split = await s.pty_exec_start(
            "printf 'a\\342'; sleep 1; printf '\\202\\254b'", yield_time_s=0.3
        )
        assert split.process_id is not None
        rest = await s.pty_write_stdin(session_id=split.process_id, chars="", yield_time_s=5)
        assert split.output + rest.output == "a€b".encode()
        flood = await s.pty_exec_start(
            "head -c 108894 /dev/zero | tr '\\0' 'w'", yield_time_s=5, max_output_tokens=50
        )
        assert flood.exit_code == 0 and flood.original_token_count is not None
        assert flood.original_token_count > 50 and len(flood.output) < 2000

    _in_session(grid, kind, body)


def test_the_ninth_pty_process_drops_the_oldest(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        ids: list[int] = []
        for _ in range(9):
            started = await s.pty_exec_start("sleep 120", yield_time_s=0)
            assert started.process_id is not None  # no LimitExceeded
            ids.append(started.process_id)
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=ids[0], chars="")  # dropped, as the SDK does
        live = await s.pty_write_stdin(session_id=ids[-1], chars="", yield_time_s=0)
        assert live.process_id == ids[-1]
        await s.pty_terminate_all()

    _in_session(grid, kind, body, background_processes=8)


def test_tty_runs_on_a_real_terminal_and_ctrl_c_interrupts(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        read = await s.pty_exec_start(
            "sh", "-c", "test -t 0 && IFS= read -r line; printf 'got %s\\n' \"$line\"",
            shell=False, tty=True, yield_time_s=2,
        )  # fmt: skip
        assert read.process_id is not None and read.exit_code is None
        answer = await s.pty_write_stdin(
            session_id=read.process_id, chars="hello from pty\n", yield_time_s=5
        )
        assert answer.exit_code == 0 and b"got hello from pty" in answer.output
        sleeper = await s.pty_exec_start("sleep", "30", shell=False, tty=True, yield_time_s=2)
        assert sleeper.process_id is not None
        stopped = await s.pty_write_stdin(
            session_id=sleeper.process_id, chars="\x03", yield_time_s=5.5
        )
        assert stopped.process_id is None and stopped.exit_code == 130  # SIGINT
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=sleeper.process_id, chars="")

    _in_session(grid, kind, body)


# -- the shell capability's tools, through the runner -------------------------------------


def _outputs(result: Any) -> list[str]:
    return [str(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]


_CALL_IDS = itertools.count()


def _calls(*calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """One model turn of tool calls, each with a call id of its own (the SDK checks)."""
    return [function_call(name, args, call_id=f"call_{next(_CALL_IDS)}") for name, args in calls]


def test_shell_tool_formats_output_and_token_counts(grid: LocalGrid, kind: str) -> None:
    model = ScriptedModel(
        [
            _calls(("exec_command", {"cmd": "echo hi; echo oops >&2; exit 3"})),
            _calls(("exec_command", {"cmd": "seq 1 20000", "max_output_tokens": 40})),
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(name="sbx", model=model, instructions="x", capabilities=[Shell()])

    async def body(client: SandgridSandboxClient) -> list[str]:
        config = RunConfig(sandbox=SandboxRunConfig(client=client, options=_options(kind)))
        result = await Runner.run(agent, "go", run_config=config)
        assert result.final_output == "done"
        return _outputs(result)

    first, second = _run(grid, body)
    assert "Process exited with code 3" in first and "hi" in first and "oops" in first
    assert "Original token count:" in second and len(second) < 2000


def _write_to_the_running_process(call: ModelCall) -> list[Any]:
    """The model's next turn: answer the process the last tool output names."""
    found = re.findall(r"Process running with session ID (\d+)", json.dumps(call.input))
    assert found, "exec_command should have left the process running"
    return _calls(("write_stdin", {"session_id": int(found[-1]), "chars": "grid\n"}))


def test_shell_tool_writes_stdin_to_a_running_process(grid: LocalGrid, kind: str) -> None:
    model = ScriptedModel(
        [
            _calls(("exec_command", {"cmd": "read x; echo got $x", "yield_time_ms": 300})),
            ModelStep.respond(_write_to_the_running_process),
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(name="sbx", model=model, instructions="x", capabilities=[Shell()])

    async def body(client: SandgridSandboxClient) -> list[str]:
        config = RunConfig(sandbox=SandboxRunConfig(client=client, options=_options(kind)))
        return _outputs(await Runner.run(agent, "go", run_config=config))

    started, written = _run(grid, body)
    assert "Process running with session ID" in started
    assert "got grid" in written and "Process exited with code 0" in written


@NEEDS_PARALLEL_TURNS
def test_two_exec_commands_in_one_model_turn(grid: LocalGrid, kind: str) -> None:
    model = ScriptedModel(
        [
            _calls(("exec_command", {"cmd": "echo one"}), ("exec_command", {"cmd": "echo two"})),
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(name="sbx", model=model, instructions="x", capabilities=[Shell()])

    async def body(client: SandgridSandboxClient) -> list[str]:
        config = RunConfig(sandbox=SandboxRunConfig(client=client, options=_options(kind)))
        return _outputs(await Runner.run(agent, "go", run_config=config))

    outs = _run(grid, body)
    assert any("one" in o for o in outs) and any("two" in o for o in outs)


@NEEDS_PARALLEL_TURNS
def test_a_manifest_of_several_entries_is_applied(grid: LocalGrid, kind: str) -> None:
    manifest = Manifest(
        entries={
            "a.txt": File(content=b"a\n"),
            "b.txt": File(content=b"b\n"),
            "tree": Dir(children={"c.txt": File(content=b"c\n")}),
        }
    )

    async def body(client: SandgridSandboxClient) -> bytes:
        async with await client.create(manifest=manifest, options=_options(kind)) as s:
            return (await s.exec("cat a.txt b.txt tree/c.txt")).stdout

    assert _run(grid, body) == b"a\nb\nc\n"


# -- runner pause / resume ----------------------------------------------------------------


def test_runner_pause_and_resume_keeps_the_workspace(
    grid: LocalGrid, kind: str, tmp_path: Path
) -> None:
    events: list[SandboxSessionEvent] = []
    sink = CallbackSink(lambda event, _s: events.append(event), mode="sync")

    @function_tool(name_override="approval_tool", needs_approval=True)
    def approval_tool() -> str:
        return "approved"

    def agent(model: ScriptedModel) -> SandboxAgent[Any]:
        return SandboxAgent(
            name="sbx",
            model=model,
            instructions="x",
            tools=[approval_tool],
            default_manifest=Manifest(entries={"seed.txt": File(content=b"seed v1\n")}),
            capabilities=[Shell()],
        )

    first_model = ScriptedModel(
        [
            _calls(("exec_command", {"cmd": "echo runtime note v1 > note.txt && cat seed.txt"})),
            _calls(("approval_tool", {})),
        ]
    )
    second_model = ScriptedModel(
        [_calls(("exec_command", {"cmd": "cat note.txt seed.txt"})), [assistant_message("done")]]
    )

    async def body(client: SandgridSandboxClient) -> tuple[list[str], list[str]]:
        snapshot = LocalSnapshotSpec(base_path=tmp_path)
        config = RunConfig(
            sandbox=SandboxRunConfig(client=client, options=_options(kind), snapshot=snapshot)
        )
        first = await Runner.run(agent(first_model), "go", run_config=config)
        assert len(first.interruptions) == 1
        state = first.to_state()
        assert state._sandbox is not None and state._sandbox["backend_id"] == "sandgrid"
        resumed_agent = agent(second_model)
        restored = await RunState.from_json(resumed_agent, state.to_json())
        restored.approve(restored.get_interruptions()[0])
        second = await Runner.run(resumed_agent, restored, run_config=config)
        assert second.final_output == "done"
        return _outputs(first), _outputs(second)

    before, after = _run(grid, body, instrumentation=Instrumentation(sinks=[sink]))
    assert "seed v1" in before[0]
    assert "runtime note v1" in after[-1] and "seed v1" in after[-1]
    assert any(e.op == "shutdown" for e in events)  # the client's instrumentation saw it


def test_a_session_handle_is_an_sdk_sandbox_session(grid: LocalGrid, kind: str) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        session = await client.create(options=_options(kind))
        assert isinstance(session, SandboxSession) and session.supports_pty()
        async with session:
            assert await session.running()
        assert not await session.running()

    _run(grid, body)


class _Store:
    """A ``RemoteSnapshotSpec`` client: snapshots kept in memory."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def upload(self, snapshot_id: str, data: io.IOBase) -> None:
        self.blobs[snapshot_id] = data.read()

    def download(self, snapshot_id: str) -> io.IOBase:
        return io.BytesIO(self.blobs[snapshot_id])

    def exists(self, snapshot_id: str) -> bool:
        return snapshot_id in self.blobs


def test_a_remote_snapshot_takes_the_clients_dependencies(grid: LocalGrid, kind: str) -> None:
    store = _Store()
    deps = Dependencies().bind_value("snapshots", store)
    spec = RemoteSnapshotSpec(client_dependency_key="snapshots")

    async def body(client: SandgridSandboxClient) -> bytes:
        s = await client.create(snapshot=spec, options=_options(kind))
        async with s:
            await s.write(Path("kept.txt"), io.BytesIO(b"remote v1\n"))
        payload = client.serialize_session_state(s.state)
        back = await client.resume(client.deserialize_session_state(payload))
        async with back:
            got: bytes = (await back.read(Path("kept.txt"))).read()
        return got

    assert _run(grid, body, dependencies=deps) == b"remote v1\n"  # no _dependencies by hand
    assert store.blobs
