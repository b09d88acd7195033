"""Which turns are audited and what their records keep: never output, contents or stdin (23.14)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import redis

from sandgrid.audit import AUDIT_ACTIONS
from sandgrid.models import CodeRequest, CodeResult, ExecRequest, ExecResult, FileRead, SessionInfo
from sandgrid.ops.code import RunCodeOp
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import DeleteOp, ListOp, ReadOp, TarDownloadOp, TarDownloadResult, WriteOp
from sandgrid.ops.lifecycle import CheckpointOp, PauseOp, RestoreOp
from sandgrid.ops.processes import ProcOp, ProcStartOp
from sandgrid.ops.session import ForkOp
from sandgrid.wire.jobs import TurnJob, TurnOp, TurnOutcome
from sandgrid.wire.objects.local import LocalObjects
from scheduler.audit.describe import MAX_PATHS, describe
from scheduler.audit.log import AuditLog

MARKER = "MARKER-never-in-the-audit"
SRC = "s-" + "a" * 16


def _job(op: TurnOp, snapshot: str | None = None) -> TurnJob:
    session = SessionInfo.model_validate(
        {
            "id": "s-1",
            "tenant": "acme",
            "type": "python",
            "state": "live",
            "quotas": {},
            "snapshot": snapshot,
            "created_at": "2026-01-01T00:00:00Z",
            "last_used": "2026-01-01T00:00:00Z",
        }
    )
    return TurnJob(turn_id="t-1", session=session, op=op)


def _out(result: Any = None, **timings: float) -> TurnOutcome:
    return TurnOutcome(turn_id="t-1", node="w1", ok=True, result=result, timings=timings)


def test_code_is_its_digest_and_head_never_its_output() -> None:
    code = f"print('{MARKER}')\n" + "x = 1\n" * 100
    ((action, fields),) = describe(
        _job(RunCodeOp(request=CodeRequest(code=code))),
        _out(CodeResult(stdout=MARKER + "\n")),
        200,
    )
    assert action == "run_code"
    assert fields["command_digest"] == "sha256:" + hashlib.sha256(code.encode()).hexdigest()
    assert fields["command_head"] == code[:200] and fields["bytes"] == len(MARKER) + 1
    start = ProcStartOp(request=ExecRequest(shell="sleep 100", env={"TOKEN": MARKER}))
    ((action, fields),) = describe(_job(start), None, 5)
    assert (
        action == "proc_start" and fields["command_head"] == "sleep" and MARKER not in str(fields)
    )


def test_stdin_is_its_size_only_and_kill_its_signal() -> None:
    ((action, fields),) = describe(_job(ProcOp(action="stdin", pid=7, data=MARKER)), None, 80)
    assert action == "proc_stdin" and fields["bytes"] == len(MARKER) and MARKER not in str(fields)
    ((action, fields),) = describe(_job(ProcOp(action="kill", pid=7, signal="KILL")), None, 80)
    assert (action, fields["detail"]) == ("proc_kill", {"pid": 7, "signal": "KILL"})
    for quiet in ("list", "logs", "wait"):
        assert describe(_job(ProcOp(action=quiet, pid=7)), None, 80) == []  # type: ignore[arg-type]


def test_file_ops_keep_paths_and_sizes_never_contents() -> None:
    files = [{"path": f"d/f{i}.txt", "content": MARKER} for i in range(40)]
    ((action, fields),) = describe(_job(WriteOp.model_validate({"files": files})), None, 80)
    assert action == "write" and fields["bytes"] == 40 * len(MARKER)
    assert fields["detail"]["files"] == 40 and len(fields["detail"]["paths"]) == MAX_PATHS
    read = FileRead(path="a.txt", content=MARKER, encoding="utf-8", size=len(MARKER))
    ((action, fields),) = describe(_job(ReadOp(path="a.txt")), _out(read), 80)
    assert (action, fields["bytes"], fields["detail"]) == ("read", len(MARKER), {"path": "a.txt"})
    ((action, fields),) = describe(_job(DeleteOp(path="d", recursive=True)), None, 80)
    assert action == "delete" and fields["detail"] == {"path": "d", "recursive": True}
    tar = TarDownloadResult(data_b64="QUJD")
    ((action, fields),) = describe(_job(TarDownloadOp(path="d")), _out(tar), 80)
    assert (action, fields["bytes"]) == ("tar_download", 3)
    assert describe(_job(ListOp()), None, 80) == []


def test_session_ops_fork_pause_restore_and_a_resume() -> None:
    assert describe(_job(ForkOp(source=SRC)), None, 80)[0] == (
        "fork",
        {"detail": {"source": SRC}},
    )
    assert describe(_job(PauseOp()), None, 80)[0][0] == "pause"
    assert describe(_job(RestoreOp(checkpoint="c1")), None, 80)[0][0] == "restore"
    assert describe(_job(CheckpointOp(name="c1")), None, 80)[0][0] == "checkpoint"
    op = ExecOp(request=ExecRequest(shell="true"))
    ran = _out(ExecResult(exit_code=0), acquire_ms=12.0)
    assert [a for a, _ in describe(_job(op, snapshot="snap-1"), ran, 80)] == ["resume", "exec"]
    assert [a for a, _ in describe(_job(op), ran, 80)] == ["exec"]  # a first sandbox: no resume
    assert [a for a, _ in describe(_job(op, "snap-1"), _out(ExecResult(exit_code=0)), 80)] == [
        "exec"
    ]


def test_every_action_described_is_a_wire_action() -> None:
    jobs: list[TurnOp] = [
        ExecOp(request=ExecRequest(shell="x")),
        RunCodeOp(request=CodeRequest(code="x")),
        ProcOp(action="stdin", pid=1),
        DeleteOp(path="x"),
        ForkOp(source=SRC),
    ]
    for op in jobs:
        for action, _ in describe(_job(op), None, 80):
            assert action in AUDIT_ACTIONS


@pytest.fixture
def log(redis_client: redis.Redis[str], tmp_path: Any) -> AuditLog:
    return AuditLog(redis_client, LocalObjects(tmp_path), command_chars=80)


def test_a_terminal_and_a_policy_change_are_recorded(log: AuditLog) -> None:
    job = _job(ExecOp(request=ExecRequest(shell="x")))
    log.terminal(job)
    log.terminal(job, opened_s=2.5)
    log.policy("acme", "s-1", {"allow": ["pypi.org", "127.0.0.9:8080"], "deny": []})
    recs = log.query("acme", order="asc").records
    assert [r.action for r in recs] == ["terminal_open", "terminal_close", "network_policy"]
    assert recs[1].duration_ms == 2500.0 and recs[0].turn == "t-1"
    assert recs[2].detail == {"allow": 2} and "pypi.org" in (recs[2].command_head or "")
