"""A turn's result is one tagged model: it travels typed, and the public bodies keep their shape."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel

from sandgrid.errors import SandboxError
from sandgrid.lifecycle import (
    CheckpointInfo,
    CheckpointList,
    ForkSessionsResult,
    PauseResult,
    RestoreResult,
)
from sandgrid.models import CodeResult, ExecResult, FileEntry, FileList, FileRead, SaveError
from sandgrid.ops.files import (
    DeleteResult,
    MkdirResult,
    MoveResult,
    StatResult,
    TarDownloadResult,
    TarUploadResult,
    WriteResult,
)
from sandgrid.ops.lifecycle import DropCheckpointResult
from sandgrid.ops.processes import StdinResult
from sandgrid.ops.saved import bare_body
from sandgrid.ops.session import CloseResult, ForkResult
from sandgrid.ops.terminal import PtyResult
from sandgrid.processes import ProcessInfo, ProcessList, ProcessLogs
from sandgrid.wire.jobs import TurnOutcome, TurnResult, expect

_PROC = ProcessInfo(pid=7, argv=["sleep", "9"], running=True, started_at=1.0, sandbox="c1")
EXAMPLES: list[BaseModel] = [
    ExecResult(exit_code=0, stdout="hi\n"),
    WriteResult(written=2),
    FileRead(path="a", content="x", encoding="utf-8", size=1),
    FileList(entries=[FileEntry(path="a", type="file")]),
    DeleteResult(deleted=1),
    StatResult(entry=FileEntry(path="a", type="file")),
    MkdirResult(created=True),
    MoveResult(entry=FileEntry(path="b", type="dir")),
    TarUploadResult(files=3),
    TarDownloadResult(data_b64="AAAA"),
    CloseResult(snapshots_deleted=2),
    ForkResult(snapshot="snap-1", forked_from="s-" + "a" * 20),
    CodeResult(result="3", execution_count=1),
    PtyResult(exit_code=0, reason="exited", bytes_out=12),
    CheckpointInfo(name="c1", snapshot="snap-2"),
    CheckpointList(checkpoints=[CheckpointInfo(name="c1", snapshot="snap-2")]),
    DropCheckpointResult(deleted="c1"),
    RestoreResult(session="s-1", checkpoint="c1", snapshot="snap-2"),
    PauseResult(session="s-1", snapshot=None, released=False),
    ForkSessionsResult(snapshots={"s-2": "000000000001-aaaaaaaaaaaa"}, memory=True),
    _PROC,
    ProcessList(processes=[_PROC]),
    ProcessLogs(pid=7, data="out", since=0, offset=3, end=3, running=True),
    StdinResult(written=5),
]


def _members() -> list[type[BaseModel]]:
    union = typing.get_args(TurnResult)[0]
    return list(typing.get_args(union))


def test_every_result_model_has_an_example_and_a_tag_of_its_own() -> None:
    members = _members()
    assert {type(e) for e in EXAMPLES} == set(members)
    tags = [m.model_fields["kind"].default for m in members]
    assert len(set(tags)) == len(tags)


@pytest.mark.parametrize("result", EXAMPLES, ids=lambda r: type(r).__name__)
def test_a_result_crosses_celery_as_its_own_model(result: Any) -> None:
    outcome = TurnOutcome(turn_id="t-1", node="w1", ok=True, result=result)
    wire = outcome.model_dump(mode="json")
    assert wire["result"]["kind"] == result.kind
    back = TurnOutcome.model_validate(wire)
    assert type(back.result) is type(result) and back == outcome
    assert TurnOutcome.model_validate_json(outcome.model_dump_json()) == outcome


@pytest.mark.parametrize("result", EXAMPLES, ids=lambda r: type(r).__name__)
def test_the_tag_is_in_no_body_and_no_schema(result: Any) -> None:
    assert "kind" not in result.model_dump(mode="json")
    assert "kind" not in type(result).model_json_schema(mode="serialization")["properties"]
    assert "kind=" not in repr(result)


def test_expect_names_a_result_of_another_kind() -> None:
    outcome = TurnOutcome(turn_id="t-1", node="w1", ok=True, result=WriteResult(written=1))
    assert expect(outcome, WriteResult, "write").written == 1
    with pytest.raises(SandboxError) as err:
        expect(outcome, ExecResult, "exec")
    assert "WriteResult" in err.value.message and "ExecResult" in err.value.message
    with pytest.raises(SandboxError, match="no result"):
        expect(TurnOutcome(turn_id="t-2", node="w1", ok=True), FileRead, "read")


def test_bare_bodies_are_what_the_routes_always_answered() -> None:
    assert bare_body(WriteResult(written=2)) == {"written": 2}
    assert bare_body(StdinResult(written=0)) == {"written": 0}
    unsaved = DeleteResult(
        deleted=1, saved=False, saved_error=SaveError(code="store_unavailable", message="down")
    )
    assert bare_body(unsaved) == {
        "deleted": 1,
        "saved": False,
        "saved_error": {"code": "store_unavailable", "message": "down"},
    }
