"""The worker's batch gate: a node lends at most its batch limit to batch turns,
interactive turns always pass, and ``close_after`` destroys the sandbox at once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from celery.exceptions import Reject

from sandgrid.models import ExecRequest, ExecResult, Quotas, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.batch_limit import batch_limit
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from worker.sessions.table import LocalSession, SessionTable
from worker.turns.entry import BatchGate, run_turn
from worker.turns.residency import Residency

NOW = datetime.now(UTC)
SESSION = SessionInfo(
    id="s-" + "a" * 20, tenant="acme", type="python", quotas=Quotas(), created_at=NOW, last_used=NOW
)


def _job(batch: bool, close_after: bool = False) -> TurnJob:
    op = ExecOp(request=ExecRequest(argv=["true"]))
    return TurnJob(turn_id="t-1", session=SESSION, op=op, batch=batch, close_after=close_after)


class FakeExecutor:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()

    def run(self, job: TurnJob) -> TurnOutcome:
        self.release.wait(5)
        return TurnOutcome(turn_id=job.turn_id, node="n1", ok=True, result=ExecResult(exit_code=0))


class FakePool:
    def __init__(self) -> None:
        self.discarded: list[Any] = []

    def discard(self, sbx: Any) -> None:
        self.discarded.append(sbx)


class FakeLedger:
    def __init__(self) -> None:
        self.released: list[str] = []

    def release_lease(self, session_id: str, node: str) -> bool:
        self.released.append(session_id)
        return True


def _residency(pool: FakePool, ledger: FakeLedger) -> Residency:
    """A real residency holding SESSION, over a fake pool and ledger (no persistence:
    closing never snapshots)."""
    sessions = SessionTable()
    sbx: Any = object()
    sessions.put(LocalSession(SESSION.id, SESSION.tenant, SESSION.type, sbx))
    return Residency("n1", ledger, sessions, pool, persistence=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("threads", "limit"), [(1, 1), (2, 1), (3, 2), (4, 2), (8, 4), (16, 8)])
def test_half_of_the_threads_is_kept_for_interactive_turns(threads: int, limit: int) -> None:
    assert batch_limit(threads) == limit


def test_the_gate_counts_batch_turns_only() -> None:
    gate = BatchGate(concurrency=6)
    assert [gate.try_enter(_job(batch=True)) for _ in range(4)] == [True, True, True, False]
    assert all(gate.try_enter(_job(batch=False)) for _ in range(10))
    gate.leave(_job(batch=True))
    assert gate.try_enter(_job(batch=True))
    assert gate.rejected == 1


def test_a_batch_turn_over_the_limit_is_requeued_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import worker.turns.entry as bg

    monkeypatch.setattr(bg, "gate", BatchGate(concurrency=2))  # one batch thread
    executor, residency = FakeExecutor(), _residency(FakePool(), FakeLedger())
    executor.release.clear()
    first = threading.Thread(target=run_turn, args=(executor, residency, _job(batch=True)))
    first.start()
    while bg.gate.running == 0:
        threading.Event().wait(0.01)
    with pytest.raises(Reject) as rejected:
        run_turn(executor, residency, _job(batch=True))
    assert rejected.value.requeue
    assert run_turn(executor, residency, _job(batch=False)).ok  # interactive still runs
    executor.release.set()
    first.join(5)
    assert bg.gate.running == 0
    assert run_turn(executor, residency, _job(batch=True)).ok


def test_close_after_destroys_the_session_sandbox() -> None:
    pool, ledger = FakePool(), FakeLedger()
    executor, residency = FakeExecutor(), _residency(pool, ledger)
    run_turn(executor, residency, _job(batch=True, close_after=False))
    assert pool.discarded == []
    run_turn(executor, residency, _job(batch=True, close_after=True))
    assert len(pool.discarded) == 1 and ledger.released == [SESSION.id]
    assert residency.sessions.get(SESSION.id) is None
    residency.close(SESSION.id)  # already gone: nothing to do
    assert len(pool.discarded) == 1
