"""A turn sent again to the process that ran it is answered, not run again (``worker.turns.ran``).

The API sends attempt 2 when it takes the holder of attempt 1 for dead; a holder
that only looked dead (its heartbeat lapsed while Redis restarted) gets attempt 2
on its direct queue, since the session is live there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.models import ExecRequest
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.registry.sessions import SessionRegistry, new_turn_id
from tests.unit.worker.turns.test_worker_snapshots import DirBackend, make_node, new_session, reg
from worker.node import Node
from worker.turns.ran import RanTurns


@pytest.fixture
def node(tmp_path: Path, redis_client: redis.Redis[str]) -> Iterator[Node]:
    node = make_node(tmp_path, SessionRegistry(redis_client, lease_ttl_s=30))
    yield node
    node.store.close()


def test_attempt_two_of_a_turn_this_process_ran_answers_the_first_run(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []
    requeued: list[str] = []
    real = DirBackend.call
    registry = reg(node)
    info = new_session(registry)
    job = TurnJob(turn_id=new_turn_id(), session=info, op=ExecOp(request=ExecRequest(shell="a")))

    def counted(self: DirBackend, sbx: Any, op: str, fields: dict[str, Any], **kw: Any) -> Any:
        if op == "exec":
            runs.append(fields["argv"][-1])  # the shell source
            # While it runs, the API takes this node for dead and sends attempt 2.
            requeued.append(registry.requeue_turn(job.turn_id, 1, node.incarnation))
        return real(self, sbx, op, fields, **kw)

    monkeypatch.setattr(DirBackend, "call", counted)
    assert registry.begin_turn(info.id, job.turn_id, 60)
    first = node.executor.run(job)
    assert first.ok and runs == ["a"] and requeued == ["requeued"]
    again = node.executor.run(job.model_copy(update={"attempt": 2}))
    assert again == first and runs == ["a"]


def test_a_turn_that_never_reached_the_sandbox_is_not_remembered(node: Node) -> None:
    info = new_session(reg(node))
    closed = info.model_copy(update={"state": "closed"})
    reg(node).close(info.id)
    job = TurnJob(turn_id=new_turn_id(), session=closed, op=ExecOp(request=ExecRequest(shell="a")))
    out = node.executor.run(job)
    assert not out.ok and node.executor.ran.get(job.turn_id) is None


def test_the_memory_is_bounded_oldest_first() -> None:
    ran = RanTurns(kept=2)
    for tid in ("t1", "t2", "t3"):
        ran.put(TurnOutcome(turn_id=tid, node="n", ok=True))
    assert ran.get("t1") is None and ran.get("t2") is not None and ran.get("t3") is not None
