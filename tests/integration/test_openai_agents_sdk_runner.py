"""The OpenAI Agents SDK's runner checks against ``SandgridSandboxClient`` on a real grid.

The second half of ``test_openai_agents_sdk_suite.py`` (its grid, its helpers):
the shell capability's tools through ``Runner.run`` with ``agents.testing``'s
scripted model, the runner's pause and resume with an approval, manifests, and
a ``RemoteSnapshotSpec`` through the client's ``dependencies``; on runc and runsc.
Checks marked ``NEEDS_PARALLEL_TURNS`` need issue 20's item 1.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from pathlib import Path
from typing import Any

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
from agents.sandbox.session import CallbackSink, Instrumentation, SandboxSessionEvent
from agents.sandbox.session.dependencies import Dependencies
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from sandgrid.integrations.openai_agents import (
    SandgridSandboxClient,
)
from sandgrid.localgrid import LocalGrid
from tests.integration import test_openai_agents_sdk_suite as suite
from tests.integration.test_openai_agents_sdk_suite import NEEDS_PARALLEL_TURNS, _options, _run

grid = suite.grid  # the suite's grid (one per module) and its runtimes
kind = suite.kind

pytestmark = pytest.mark.integration


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
