"""The worker's batch gate: a node lends at most its batch limit to batch turns,
interactive turns always pass, and ``close_after`` destroys the sandbox at once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from celery.exceptions import Reject

from sandgrid.models import ExecRequest, Quotas, SessionInfo
from sandgrid.wire.capacity import batch_limit
from sandgrid.wire.jobs import ExecOp, TurnJob, TurnOutcome
from worker.batch_gate import BatchGate, close_local, run_turn

NOW = datetime.now(UTC)
SESSION = SessionInfo(
    id="s-" + "a" * 20, tenant="acme", type="python", quotas=Quotas(), created_at=NOW, last_used=NOW
)


def _job(batch: bool, close_after: bool = False) -> TurnJob:
    op = ExecOp(request=ExecRequest(argv=["true"]))
    return TurnJob(turn_id="t-1", session=SESSION, op=op, batch=batch, close_after=close_after)


class FakeNode:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.discarded: list[Any] = []
        self.local: dict[str, object] = {SESSION.id: object()}
        self.executor = self
        self.sessions = self

    def run(self, job: TurnJob) -> TurnOutcome:
        self.release.wait(5)
        return TurnOutcome(turn_id=job.turn_id, node="n1", ok=True, result={})

    def get(self, session_id: str) -> object | None:
        return self.local.get(session_id)

    def discard(self, local: object) -> None:
        self.discarded.append(local)
        self.local.clear()


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
    import worker.batch_gate as bg

    monkeypatch.setattr(bg, "gate", BatchGate(concurrency=2))  # one batch thread
    node = FakeNode()
    node.release.clear()
    first = threading.Thread(target=run_turn, args=(node, _job(batch=True)))
    first.start()
    while bg.gate.running == 0:
        threading.Event().wait(0.01)
    with pytest.raises(Reject) as rejected:
        run_turn(node, _job(batch=True))
    assert rejected.value.requeue
    assert run_turn(node, _job(batch=False)).ok  # interactive still runs
    node.release.set()
    first.join(5)
    assert bg.gate.running == 0
    assert run_turn(node, _job(batch=True)).ok


def test_close_after_destroys_the_session_sandbox() -> None:
    node = FakeNode()
    run_turn(node, _job(batch=True, close_after=False))
    assert node.discarded == []
    run_turn(node, _job(batch=True, close_after=True))
    assert len(node.discarded) == 1
    close_local(node, SESSION.id)  # already gone: nothing to do
    assert len(node.discarded) == 1
