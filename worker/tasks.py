"""The Celery tasks of a worker node: thin shells, model in -> executor -> model out."""

from __future__ import annotations

from typing import Any

from scheduler import names
from scheduler.celery_app import app
from scheduler.models import TurnJob
from worker.node import get_node

__all__ = ["turn"]


@app.task(name=names.TASK_TURN, acks_late=True, ignore_result=False)
def turn(job: dict[str, Any]) -> dict[str, Any]:
    """Run one turn (``TurnJob`` JSON) and return its ``TurnOutcome`` JSON."""
    outcome = get_node().executor.run(TurnJob.model_validate(job))
    return outcome.model_dump(mode="json")
