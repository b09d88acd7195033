"""The Celery tasks of a worker node: thin shells, model in -> executor -> model out.

When the node reserves a turn's message that must wait for a free thread (the
prefetch), ``note_received`` writes the node and its incarnation on the turn's
record, so that the API watches this process from then on: a message held by a
process that dies is sent again at once (the broker keeps no copy of a turn
it handed out: ``sandgrid.wire.broker.QoS``). A message that finds a thread free is claimed
(``claim_turn``, which names the process too) within a millisecond, so it is not
noted first (issue 22.1: three commands and a round trip on the consumer's
thread, before the turn starts); a process that dies in that millisecond is
seen as the API sees one that dies before it notes (``scheduler.turns.watch``:
its direct queue's node, or its type's processes).

What Celery shows of a turn (its success log line, the events Flower shows, the
remote-control answers) is a summary, never its output or its arguments
(``worker.turns.task_repr``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals
from celery.worker import state as worker_state
from pydantic import ValidationError

from sandgrid.wire import names
from sandgrid.wire.celery_app import app
from sandgrid.wire.jobs import TurnJob
from worker import metrics
from worker.node import get_node
from worker.turns.entry import gate, run_turn
from worker.turns.memory_stage import stage
from worker.turns.task_repr import LoggedOutcome, SafeRequest

__all__ = ["build_template", "cancel", "note_received", "ping", "stage_memory", "turn"]

log = logging.getLogger(__name__)


@app.task(name=names.TASK_TURN, acks_late=True, ignore_result=False, Request=SafeRequest)
def turn(job: dict[str, Any]) -> LoggedOutcome:
    """Run one turn (``TurnJob`` JSON) and return its ``TurnOutcome`` JSON.

    The value is a ``LoggedOutcome``: the result backend stores the outcome's
    JSON, and Celery's log line and events show only its summary. Batch turns
    pass the node's batch gate first (at most half its threads).
    """
    node = get_node()
    turn_job = _job(job)
    outcome = run_turn(node.executor, node.residency, turn_job)
    metrics.observe_outcome(turn_job, outcome)
    return LoggedOutcome(outcome)


def _job(job: dict[str, Any]) -> TurnJob:
    """The message's ``TurnJob``; refused with the fields' names and rules, never
    their values (pydantic's message quotes them: Celery would log it)."""
    try:
        return TurnJob.model_validate(job)
    except ValidationError as exc:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['type']}" for e in exc.errors()[:10])
        raise ValueError(f"not a TurnJob ({exc.error_count()} errors): {wrong}") from None


@app.task(name=names.TASK_PING, ignore_result=False)
def ping(value: int) -> int:
    """Answer ``value``: what a turn costs in Celery and the broker alone (bench/bench_grid.py)."""
    return value


@app.task(name=names.TASK_CANCEL, ignore_result=True)
def cancel(turn_id: str) -> str:
    """Kill the running exec of ``turn_id`` on this node (``worker.turns.interactive``)."""
    return get_node().control.cancel(turn_id)


@app.task(name=names.TASK_BUILD, acks_late=False, ignore_result=True)
def build_template(job: dict[str, Any]) -> str:
    """Build one template (``BuildJob`` JSON, 25.2); its end is in the template's record."""
    from sandgrid.wire.builds import BuildJob
    from worker.templates import BuildFailed, node_builder

    try:
        return node_builder(get_node()).build(BuildJob.model_validate(job)).state
    except (BuildFailed, ValidationError) as exc:
        log.warning("template build refused: %s", type(exc).__name__)
        return "refused"


@app.task(name=names.TASK_STAGE, acks_late=False, ignore_result=True)
def stage_memory(session_id: str, sha256: str) -> str:
    """Stage a paused session's memory image on this node for its resume (24.1)."""
    node = get_node()
    return stage(node.name, node.executor.parts, session_id, sha256)


@signals.task_received.connect(weak=False)
def note_received(sender: object = None, request: Any = None, **_: Any) -> None:
    """Celery reserved a message that waits for a thread: note this process as the
    turn's holder.

    Best effort: a failure only means the API learns of the holder at its claim.
    """
    if request is None or request.task_name != names.TASK_TURN or not request.args:
        return
    if len(worker_state.reserved_requests) < gate.threads:
        return  # a thread is free (this message is not counted yet): the claim comes at once
    try:
        job = request.args[0]
        node = get_node()
        node.ledger.receive_turn(
            job["turn_id"], node.name, int(job.get("attempt", 1)), node.incarnation
        )
    except Exception:
        log.exception("could not note the reception of task %s", getattr(request, "id", "?"))
