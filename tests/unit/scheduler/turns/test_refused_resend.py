"""A resend refused by the lease of the node taken for lost is no answer (issue 22.5).

A Redis failover longer than the node TTL makes a live node's heartbeat lapse:
the API takes it for lost and sends its turn again; the copy, on another node,
is refused by the live node's lease (``session_busy``, ``ran: false``) while the
first copy runs on. The API must then wait for the first copy's result, not
answer "did not run"; every other refusal stands (the holder really died or
restarted, or no earlier attempt ever started).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from sandgrid.errors import Conflict, ErrorCode
from sandgrid.models import ExecRequest, ExecResult, Quotas, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.ledger import NodeRecord
from scheduler.turns.recovery import TurnRecovery
from scheduler.turns.watch import Lost
from tests.support.fakes import FakeWorker, Grid


def _refusal(turn_id: str, node: str, owner: str, code: str = "session_busy") -> TurnOutcome:
    """What a worker answers when the session's lease is another node's."""
    exc = Conflict(
        f"session is held by node {owner}",
        code=ErrorCode(code),
        operation="turn",
        context={"owner": owner, "ran": False},
    )
    return TurnOutcome(turn_id=turn_id, node=node, ok=False, error=exc.to_body()["error"])


# ---- the decision, on a fake registry --------------------------------------------


class FakeRecords:
    """The registry as ``on_refused`` reads it: heartbeat records, and the reclaim."""

    def __init__(self, nodes: dict[str, str], reclaim: bool = True) -> None:
        self.nodes = nodes
        self.reclaim = reclaim
        self.reclaimed: list[tuple[str, int, str, str, str]] = []

    def node_record(self, node: str) -> NodeRecord | None:
        inc = self.nodes.get(node)
        return None if inc is None else NodeRecord(ts=time.time(), inc=inc)

    def reclaim_turn(self, turn_id: str, attempt: int, refuser: str, node: str, inc: str) -> bool:
        self.reclaimed.append((turn_id, attempt, refuser, node, inc))
        return self.reclaim


def _retry(attempt: int = 2) -> TurnJob:
    now = datetime.now(UTC)
    session = SessionInfo(
        id="s-1", tenant="a", type="python", quotas=Quotas(), created_at=now, last_used=now
    )
    op = ExecOp(request=ExecRequest(shell="x"))
    return TurnJob(turn_id="t-1", session=session, op=op, attempt=attempt)


def _decide(records: FakeRecords, outcome: TurnOutcome, lost: Lost, attempt: int = 2) -> bool:
    recovery = TurnRecovery(records)  # type: ignore[arg-type]
    return recovery.on_refused(_retry(attempt), outcome, lost)


def test_a_refusal_by_the_live_holders_lease_goes_back_to_the_earlier_attempt() -> None:
    records = FakeRecords({"w1": "inc-a"})
    assert _decide(records, _refusal("t-1", "w2", owner="w1"), Lost("w1", "inc-a"))
    assert records.reclaimed == [("t-1", 2, "w2", "w1", "inc-a")]


@pytest.mark.parametrize(
    ("nodes", "outcome", "lost", "why"),
    [
        ({"w1": "inc-b"}, _refusal("t-1", "w2", "w1"), Lost("w1", "inc-a"), "holder restarted"),
        ({}, _refusal("t-1", "w2", "w1"), Lost("w1", "inc-a"), "holder's heartbeat is gone"),
        ({"w1": "inc-a", "w3": "x"}, _refusal("t-1", "w2", "w3"), Lost("w1", "inc-a"), "other"),
        ({"w1": "inc-a"}, _refusal("t-1", "w2", "w1"), Lost("w1"), "nobody held the attempt"),
        (
            {"w1": "inc-a"},
            _refusal("t-1", "w2", "w1", code="session_closed"),
            Lost("w1", "inc-a"),
            "not a lease refusal",
        ),
        (
            {"w1": "inc-a"},
            TurnOutcome(turn_id="t-1", node="w2", ok=True),
            Lost("w1", "inc-a"),
            "an answer",
        ),
    ],
)
def test_every_other_answer_of_a_resend_stands(
    nodes: dict[str, str], outcome: TurnOutcome, lost: Lost, why: str
) -> None:
    records = FakeRecords(nodes)
    assert not _decide(records, outcome, lost), why
    assert records.reclaimed == []


def test_a_refusal_stands_when_the_record_moved_on_or_no_attempt_started() -> None:
    records = FakeRecords({"w1": "inc-a"}, reclaim=False)
    assert not _decide(records, _refusal("t-1", "w2", owner="w1"), Lost("w1", "inc-a"))
    assert len(records.reclaimed) == 1


def test_a_first_attempt_is_never_taken_back() -> None:
    records = FakeRecords({"w1": "inc-a"})
    assert not _decide(records, _refusal("t-1", "w2", "w1"), Lost("w1", "inc-a"), attempt=1)


# ---- the record, on the test Redis -----------------------------------------------


def test_reclaim_undoes_the_refusers_claim_and_names_the_holder(grid: Grid) -> None:
    reg = grid.services.registry
    assert reg.begin_turn("s-x", "t-rc", 30)
    assert reg.ledger.claim_turn("t-rc", "w1", 1, "inc-a")  # the first copy runs
    assert reg.requeue_turn("t-rc", 1, "inc-a") == "requeued"
    assert reg.ledger.claim_turn("t-rc", "w2", 2, "inc-w2")  # the copy, refused by the lease
    assert not reg.reclaim_turn("t-rc", 2, "w3", "w1", "inc-a")  # not that refuser's claim
    assert not reg.reclaim_turn("t-rc", 1, "w2", "w1", "inc-a")  # not that attempt
    assert reg.reclaim_turn("t-rc", 2, "w2", "w1", "inc-a")
    state = reg.turn_state("t-rc")
    assert (state["state"], state["attempt"], state["node"], state["inc"], state["runs"]) == (
        "running",
        "2",
        "w1",
        "inc-a",
        "1",
    )
    for attempt in (1, 2):  # a late redelivery of either message still runs nothing
        assert not reg.ledger.claim_turn("t-rc", "w2", attempt, "inc-w2")
    assert reg.requeue_turn("t-rc", 2, "inc-a") == "requeued"  # the holder may still die


def test_reclaim_refuses_when_no_earlier_attempt_was_claimed(grid: Grid) -> None:
    reg = grid.services.registry
    assert reg.begin_turn("s-y", "t-rn", 30)
    assert reg.ledger.receive_turn("t-rn", "w1", 1, "inc-a")  # held, never run
    assert reg.requeue_turn("t-rn", 1, "inc-a") == "requeued"
    assert reg.ledger.claim_turn("t-rn", "w2", 2, "inc-w2")
    assert not reg.reclaim_turn("t-rn", 2, "w2", "w1", "inc-a")  # nothing else runs it
    assert reg.turn_state("t-rn")["node"] == "w2"


# ---- the whole turn, through the API -----------------------------------------------


class FailoverHolder(FakeWorker):
    """Attempt 1 runs on ``w1``/``inc-a``, which holds the session's lease; its
    heartbeat lapses on the 2nd poll (a failover longer than the node TTL) and it
    beats again before the resend is taken by ``w2``, which claims it and is
    refused by the lease; attempt 1 answers after that, as the node it ran on."""

    def __init__(self, grid: Grid, *, restart: bool = False) -> None:
        super().__init__(grid.services.registry.ledger, node="w1")
        self.polls, self.refused, self.restart = 0, False, restart

    def wait(self, job: TurnJob, timeout: float) -> TurnOutcome | None:
        ledger = self.registry
        if job.attempt > 1:
            inc = "inc-b" if self.restart else "inc-a"
            ledger.heartbeat("w1", 30, incarnation=inc, types=["python"])
            assert ledger.claim_turn(job.turn_id, "w2", job.attempt, "inc-w2")
            assert not ledger.acquire_lease(job.session.id, "w2")
            self.refused = True
            return _refusal(job.turn_id, "w2", owner="w1")
        self.polls += 1
        if self.polls == 1:
            assert ledger.claim_turn(job.turn_id, "w1", 1, "inc-a")
            assert ledger.acquire_lease(job.session.id, "w1")
        if self.polls == 2:
            ledger.redis.delete(names.node_key("w1"))  # lapsed while Redis failed over
        if self.refused:
            ledger.record_turn(job.session.id, snapshot="snap-1", turn_id=job.turn_id)
            result = ExecResult(exit_code=0, stdout="ran once\n", duration_ms=1.0, node="w1")
            return TurnOutcome(turn_id=job.turn_id, node="w1", ok=True, result=result)
        time.sleep(min(timeout, 0.05))
        return None


def _run(grid: Grid, monkeypatch: pytest.MonkeyPatch, worker: FailoverHolder) -> Any:
    reg = grid.services.registry
    monkeypatch.setattr(reg, "uptime_s", lambda: 1000.0)  # a promoted replica's uptime
    reg.ledger.heartbeat("w1", 30, incarnation="inc-a", types=["python"])
    grid.services.runner.dispatcher = worker
    grid.worker = worker
    r = grid.http.post("/v1/sessions", json={}, headers=grid.headers())
    sid = r.json()["id"]
    return grid.http.post(f"/v1/sessions/{sid}/exec", json={"shell": "x"}, headers=grid.headers())


def test_a_resend_refused_by_the_live_holder_answers_the_first_copys_result(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = FailoverHolder(grid)
    r = _run(grid, monkeypatch, worker)
    assert r.status_code == 200, r.text  # before 22.5's fix: session_busy, "ran": false
    assert r.json()["stdout"] == "ran once\n"
    (first, _), (second, _) = worker.sent
    assert (first.attempt, second.attempt) == (1, 2)
    assert grid.services.registry.turn_state(first.turn_id)["runs"] == "1"


def test_a_resend_refused_by_a_restarted_holder_still_says_it_did_not_run(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = _run(grid, monkeypatch, FailoverHolder(grid, restart=True))
    error = r.json()["error"]
    assert error["code"] == "session_busy" and error["context"]["ran"] is False
