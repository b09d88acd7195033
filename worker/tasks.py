"""The Celery tasks of a worker node: thin shells, model in -> executor -> model out.

When the node reserves a turn's message (it may wait for a free thread: the
prefetch), ``note_received`` writes the node and its incarnation on the turn's
record, so that the API watches this process from then on: a message held by a
process that dies is sent again at once instead of waiting in Redis's unacked
set for the visibility timeout.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from sandgrid.wire import names
from sandgrid.wire.celery_app import app
from sandgrid.wire.jobs import TurnJob
from worker import metrics
from worker.node import get_node
from worker.turns.entry import run_turn

__all__ = ["cancel", "note_received", "ping", "turn"]

log = logging.getLogger(__name__)


@app.task(name=names.TASK_TURN, acks_late=True, ignore_result=False)
def turn(job: dict[str, Any]) -> dict[str, Any]:
    """Run one turn (``TurnJob`` JSON) and return its ``TurnOutcome`` JSON.

    Batch turns pass the node's batch gate first (at most half its threads).
    """
    node = get_node()
    turn_job = TurnJob.model_validate(job)
    outcome = run_turn(node.executor, node.residency, turn_job)
    metrics.observe_outcome(turn_job, outcome)
    return outcome.model_dump(mode="json")


@app.task(name=names.TASK_PING, ignore_result=False)
def ping(value: int) -> int:
    """Answer ``value``: what a turn costs in Celery and the broker alone (bench/bench_grid.py)."""
    return value


@app.task(name=names.TASK_CANCEL, ignore_result=True)
def cancel(turn_id: str) -> str:
    """Kill the running exec of ``turn_id`` on this node (``worker.turns.interactive``)."""
    return get_node().control.cancel(turn_id)


@signals.task_received.connect(weak=False)
def note_received(sender: object = None, request: Any = None, **_: Any) -> None:
    """Celery reserved a message: note this process as the turn's holder.

    Best effort: a failure only means the API learns of the holder at its claim.
    """
    if request is None or request.task_name != names.TASK_TURN or not request.args:
        return
    try:
        job = request.args[0]
        node = get_node()
        node.ledger.receive_turn(
            job["turn_id"], node.name, int(job.get("attempt", 1)), node.incarnation
        )
    except Exception:
        log.exception("could not note the reception of task %s", getattr(request, "id", "?"))
