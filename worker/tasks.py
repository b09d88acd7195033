"""The Celery tasks of a worker node: thin shells, model in -> executor -> model out."""

from __future__ import annotations

from typing import Any

from sandgrid.wire import names
from sandgrid.wire.celery_app import app
from sandgrid.wire.jobs import TurnJob
from worker.batch_gate import run_turn
from worker.node import get_node

__all__ = ["turn"]


@app.task(name=names.TASK_TURN, acks_late=True, ignore_result=False)
def turn(job: dict[str, Any]) -> dict[str, Any]:
    """Run one turn (``TurnJob`` JSON) and return its ``TurnOutcome`` JSON.

    Batch turns pass the node's batch gate first (at most half its threads).
    """
    node = get_node()
    outcome = run_turn(node.executor, node.residency, TurnJob.model_validate(job))
    return outcome.model_dump(mode="json")
