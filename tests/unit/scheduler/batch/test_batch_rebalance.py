"""A node's lanes stay within its batch limit (``BatchRun._rebalance``), and a lane
closed after a failed job frees its place on the node.

Before, the place was kept: every next session of that lane found the node
"full" and was closed after its first job, so the lane ran each job in a new
sandbox (a 1000-job batch slowed from ~60 to ~5 jobs/s after one failed job).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from scheduler.batch.lanes import ReusedLane
from scheduler.batch.run import BatchRun


class _Lane(ReusedLane):
    """A reused lane without a grid: a session id, a node, the jobs it ran."""

    def __init__(self, node: str) -> None:
        self.session_id: str | None = "s-1"
        self.node = node
        self.jobs_run = 1
        self.closed = False

    def close(self) -> None:
        self.session_id, self.closed = None, True


def _run(limit: int) -> Any:
    run: Any = BatchRun.__new__(BatchRun)
    run.info = SimpleNamespace(type="python")
    run.setup = SimpleNamespace(capacity=SimpleNamespace(limits=lambda _t: {"n1": limit}))
    run._node_lanes, run._counted, run._lock = {}, {}, threading.Lock()
    run._new_lane = lambda index: _Lane("n1")
    return run


def test_a_surplus_lane_is_reopened_and_a_kept_one_stays() -> None:
    run = _run(limit=1)
    first, second = _Lane("n1"), _Lane("n1")
    assert run._rebalance(first, 0) is first
    reopened = run._rebalance(second, 1)
    assert second.closed and reopened is not second
    assert run._node_lanes == {"n1": 1}


def test_a_lane_closed_after_a_failed_job_frees_its_place() -> None:
    run = _run(limit=1)
    lane = _Lane("n1")
    assert run._rebalance(lane, 0) is lane
    lane.close()  # a failed job closed it
    assert run._rebalance(lane, 0) is lane and run._node_lanes == {"n1": 0}
    lane.session_id, lane.jobs_run, lane.closed = "s-2", 1, False  # the next job's session
    assert run._rebalance(lane, 0) is lane and not lane.closed  # kept, not pushed off
    assert run._node_lanes == {"n1": 1}
