"""Worker death answered fast, and types nobody serves refused at once (fake grid).

The fake worker plays the processes: it notes a turn as received by a node and
incarnation, then "dies" (its heartbeat lapses, or the node restarts as a new
incarnation); the API must send the turn again, once, and answer quickly.
"""

from __future__ import annotations

import time
from typing import Any

from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.registry.nodes import NodeDirectory
from tests.support.fakes import FakeNodes, FakeWorker, Grid, LapsingHolder


class DyingHolder(FakeWorker):
    """Attempt 1 is received by ``node``/``inc-a`` and never answered; on the
    ``die_after``-th poll ``die`` runs; later attempts are answered by ``node``."""

    def __init__(self, grid: Grid, node: str, die: Any, *, receive: bool = True) -> None:
        super().__init__(grid.services.registry.ledger, node=node)
        self.die, self.receive, self.polls = die, receive, 0

    def wait(self, job: TurnJob, timeout: float) -> TurnOutcome | None:
        if job.attempt > 1:
            return super().wait(job, timeout)
        self.polls += 1
        if self.polls == 1 and self.receive:
            self.registry.receive_turn(job.turn_id, self.node, 1, "inc-a")
        if self.polls == 3:
            self.die()
        time.sleep(min(timeout, 0.05))
        return None


def _session(grid: Grid) -> str:
    r = grid.http.post("/v1/sessions", json={}, headers=grid.headers())
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _exec(grid: Grid, sid: str) -> Any:
    return grid.http.post(f"/v1/sessions/{sid}/exec", json={"shell": "x"}, headers=grid.headers())


def _use(grid: Grid, worker: FakeWorker) -> None:
    grid.services.runner.dispatcher = worker
    grid.worker = worker


def test_a_turn_held_by_a_restarted_incarnation_is_sent_again_once(grid: Grid) -> None:
    reg = grid.services.registry
    reg.ledger.heartbeat("w9", 30, incarnation="inc-a", types=["python"])
    worker = DyingHolder(grid, "w9", lambda: reg.ledger.heartbeat("w9", 30, incarnation="inc-b"))
    _use(grid, worker)
    sid = _session(grid)
    t0 = time.monotonic()
    r = _exec(grid, sid)
    assert r.status_code == 200, r.text
    assert time.monotonic() - t0 < 3
    (first, q1), (second, q2) = worker.sent
    assert (first.attempt, second.attempt, second.turn_id) == (1, 2, first.turn_id)
    assert q1 == q2 == names.type_queue("python")  # the session had no owner
    state = reg.turn_state(first.turn_id)
    assert state["runs"] == "1" and state["attempt"] == "2"
    assert not reg.ledger.claim_turn(first.turn_id, "w9", 1, "inc-a")  # the old message


def test_a_turn_held_by_a_node_whose_heartbeat_lapsed_is_sent_again(grid: Grid) -> None:
    reg = grid.services.registry
    reg.ledger.heartbeat("w8", 30, incarnation="inc-a", types=["python"])
    worker = DyingHolder(grid, "w8", lambda: reg.redis.delete(names.node_key("w8")))
    worker.node = "w8"
    _use(grid, worker)
    sid = _session(grid)
    r = _exec(grid, sid)
    assert r.status_code == 200, r.text
    assert [j.attempt for j, _ in worker.sent] == [1, 2]


def test_a_direct_turn_of_a_restarted_node_goes_to_its_new_incarnation(grid: Grid) -> None:
    reg = grid.services.registry
    sid = _session(grid)
    reg.ledger.heartbeat("w7", 30, incarnation="inc-a", types=["python"])
    assert reg.ledger.acquire_lease(sid, "w7")
    worker = DyingHolder(
        grid, "w7", lambda: reg.ledger.heartbeat("w7", 30, incarnation="inc-b"), receive=False
    )
    _use(grid, worker)
    r = _exec(grid, sid)
    assert r.status_code == 200, r.text
    # Nobody noted the message: the node restarted, so its direct queue's message
    # may be gone; the new incarnation holds the lease under the same name.
    assert [(j.attempt, q) for j, q in worker.sent] == [(1, "node.w7"), (2, "node.w7")]


def test_an_unheld_turn_is_sent_again_when_a_consumer_of_its_type_died(grid: Grid) -> None:
    reg = grid.services.registry
    reg.ledger.heartbeat("w6", 30, incarnation="inc-a", types=["python"])
    worker = DyingHolder(grid, "w6", lambda: reg.redis.delete(names.node_key("w6")), receive=False)
    worker.node = "fake-1"
    _use(grid, worker)
    sid = _session(grid)
    t0 = time.monotonic()
    r = _exec(grid, sid)
    assert r.status_code == 200, r.text
    assert 1.0 <= time.monotonic() - t0 < 4  # after the grace, not before
    assert [j.attempt for j, _ in worker.sent] == [1, 2]


def test_a_turn_that_ran_twice_is_not_run_a_third_time(grid: Grid) -> None:
    reg = grid.services.registry
    grid.worker.node = "doomed"
    reg.ledger.heartbeat("doomed", 0.3, incarnation="x")
    grid.worker.silent = True  # claims every attempt, answers none, dies
    sid = _session(grid)
    r = _exec(grid, sid)
    assert r.status_code == 503 and r.json()["error"]["code"] == "worker_lost"
    # the first run's worker died; the second run's (same silent fake) too
    assert len(grid.worker.sent) <= 2


def test_requeue_is_atomic_with_the_holder_seen(grid: Grid) -> None:
    reg = grid.services.registry
    assert reg.begin_turn("s-x", "t-rq", 30)
    assert reg.ledger.receive_turn("t-rq", "w1", 1, "a")
    assert reg.requeue_turn("t-rq", 1, "") == "held"  # a live process took it meanwhile
    assert reg.requeue_turn("t-rq", 1, "a") == "requeued"
    assert reg.requeue_turn("t-rq", 1, "") == "final"  # attempt 1 is replaced already
    assert not reg.ledger.receive_turn("t-rq", "w1", 1, "a")  # stale message
    assert reg.ledger.claim_turn("t-rq", "w2", 2, "c")
    assert reg.turn_state("t-rq")["inc"] == "c"


def test_types_nobody_serves_are_refused_at_once(grid: Grid) -> None:
    source = FakeNodes(grid.services.registry.ledger)
    source.capacity = False
    grid.services.admission.nodes = NodeDirectory(source, cache_s=0)
    sid_before = _session_or_error(grid, "python")
    assert sid_before["error"]["code"] == "no_capacity"
    assert "no live worker serves type 'python'" in sid_before["error"]["message"]
    grid.services.registry.ledger.heartbeat("w5", 30, incarnation="i", types=["python"])
    assert "id" in _session_or_error(grid, "python")
    t0 = time.monotonic()
    refused = _session_or_error(grid, "python-gvisor")
    assert refused["error"]["code"] == "no_capacity" and time.monotonic() - t0 < 1


def _session_or_error(grid: Grid, sandbox_type: str) -> Any:
    r = grid.http.post("/v1/sessions", json={"type": sandbox_type}, headers=grid.headers())
    assert r.status_code in (201, 503), r.text
    return r.json()


def test_a_turn_of_a_type_nobody_serves_any_more_is_refused(grid: Grid) -> None:
    sid = _session(grid)
    source = FakeNodes(grid.services.registry.ledger)
    source.capacity = False
    grid.services.admission.nodes = NodeDirectory(source, cache_s=0)
    r = _exec(grid, sid)
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_capacity"
    assert int(r.headers["Retry-After"]) >= 1  # when to look again
    assert grid.worker.sent == []


def test_types_lists_the_catalog_and_its_live_nodes(grid: Grid) -> None:
    grid.services.registry.ledger.heartbeat("w4", 30, incarnation="i", types=["python-gvisor"])
    with grid.client() as c:
        types = {t.name: t for t in c.types()}
    assert types["python-gvisor"].runtime == "runsc" and types["python"].runtime == "runc"
    assert "w4" in types["python-gvisor"].nodes and "w4" not in types["python"].nodes


class OutageHolder(LapsingHolder):
    """The lapse is a Redis restart: its uptime starts again from 0."""

    def __init__(self, grid: Grid, node: str, uptime: list[float]) -> None:
        super().__init__(grid.services.registry.ledger, node=node)
        self.uptime = uptime

    def lapse(self) -> None:
        self.uptime[0] = 0.0


def test_a_record_lapsed_in_a_redis_restart_is_no_death_within_the_grace(
    grid: Grid, monkeypatch: Any
) -> None:
    reg = grid.services.registry
    uptime = [1000.0]
    monkeypatch.setattr(reg, "uptime_s", lambda: uptime[0])
    grid.services.runner.restart_grace_s = 60.0
    reg.ledger.heartbeat("w6", 30, incarnation="inc-a", types=["python"])
    worker = OutageHolder(grid, "w6", uptime)
    _use(grid, worker)
    sid = _session(grid)
    r = _exec(grid, sid)
    assert r.status_code == 200, r.text
    assert [j.attempt for j, _ in worker.sent] == [1]  # never sent again: it ran once


def test_a_record_still_missing_past_the_grace_is_a_death(grid: Grid, monkeypatch: Any) -> None:
    reg = grid.services.registry
    monkeypatch.setattr(reg, "uptime_s", lambda: 0.5)
    grid.services.runner.restart_grace_s = 0.4
    reg.ledger.heartbeat("w5", 30, incarnation="inc-a", types=["python"])
    worker = DyingHolder(grid, "w5", lambda: reg.redis.delete(names.node_key("w5")))
    _use(grid, worker)
    r = _exec(grid, _session(grid))
    assert r.status_code == 200, r.text
    assert [j.attempt for j, _ in worker.sent] == [1, 2]
