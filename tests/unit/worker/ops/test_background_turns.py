"""Quick ops on background processes (``worker.ops.processes.proc_turn``), without a sandbox:
what they answer when the idle reaper releases the session under them, and that
they count as the session's use."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, SandboxError, SandboxLost
from sandgrid.models import Quotas, SessionInfo
from sandgrid.ops.processes import ProcOp
from sandgrid.processes import ProcessInfo, ProcessList
from sandgrid.wire.jobs import TurnJob
from worker.ops.processes import proc_turn
from worker.sandboxes import Sandbox
from worker.sessions.gate import SessionGate, Share
from worker.sessions.table import LocalSession, SessionTable


class _Backend:
    """The agent request a wait makes, refusing a sandbox that is not usable as the real
    one does."""

    def __init__(self) -> None:
        self.waited = 0

    def call(self, sbx: Sandbox, op: str, fields: dict[str, Any], **_: Any) -> dict[str, Any]:
        if sbx.state not in ("warm", "leased"):
            raise SandboxError(f"sandbox {sbx.name} is {sbx.state}, not usable")
        assert op == "proc_wait"
        self.waited += 1
        info = ProcessInfo(
            pid=fields["pid"], argv=["sleep", "60"], running=False, signal=9, started_at=0
        )
        return info.model_dump(mode="json", exclude={"sandbox", "node"})


class _ReleasedWhileWaited(SessionGate):
    """A session gate that the idle reaper held alone: it released the session, then let go."""

    def __init__(self, sessions: SessionTable, local: LocalSession) -> None:
        super().__init__()
        self.sessions, self.local = sessions, local

    @contextlib.contextmanager
    def turn(self) -> Iterator[Share]:
        self.local.sandbox.state = "destroyed"
        self.sessions.pop(self.local.session_id)
        with super().turn() as share:
            yield share


def _session() -> tuple[SessionTable, LocalSession, TurnJob]:
    quotas = Quotas()
    sbx = Sandbox("c1", "sandgrid-python-c1", "python", "runc", quotas, {}, state="leased")
    now = datetime.now(UTC)
    info = SessionInfo(
        id="s1", tenant="t", type="python", quotas=quotas, created_at=now, last_used=now
    )
    local = LocalSession(session_id="s1", tenant="t", sandbox_type="python", sandbox=sbx)
    sessions = SessionTable()
    sessions.put(local)
    job = TurnJob(turn_id="t1", session=info, op=ProcOp(action="wait", pid=7, sandbox="c1"))
    return sessions, local, job


def test_a_session_released_while_the_op_waited_is_process_lost() -> None:
    sessions, local, job = _session()
    local.gate = _ReleasedWhileWaited(sessions, local)
    backend = _Backend()
    with pytest.raises(SandboxLost) as err:
        proc_turn(sessions, lambda _type: backend, job, "n1")  # type: ignore[arg-type,return-value]
    assert err.value.code == ErrorCode.PROCESS_LOST and backend.waited == 0
    listing = job.model_copy(update={"op": ProcOp(action="list", sandbox="c1")})
    assert proc_turn(sessions, lambda _type: backend, listing, "n1") == ProcessList(processes=[])  # type: ignore[arg-type,return-value]


def test_a_quick_op_counts_as_the_sessions_use() -> None:
    sessions, local, job = _session()
    local.last_used = 0.0
    backend = _Backend()
    answer = proc_turn(sessions, lambda _type: backend, job, "n1")  # type: ignore[arg-type,return-value]
    assert isinstance(answer, ProcessInfo)
    assert answer.signal == 9 and answer.node == "n1" and backend.waited == 1
    assert local not in sessions.idle_since(time.monotonic() - 1.0)  # the reaper passes it by
