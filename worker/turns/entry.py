"""The entry of every turn on this node: the batch gate, then the executor, then a close.

Every turn the Celery task receives goes through ``run_turn``: an interactive
turn passes the gate at once, a batch turn takes one of the node's batch
slots, and a one-turn session is closed after its turn.

A node runs its direct queue, ``sbx.<type>`` and ``sbx.<type>.batch`` in one
Celery worker with N threads. The scheduler keeps the grid's batch turns in
flight under the sum of the nodes' batch limits (``scheduler.batch.capacity``), but
which node takes a message from a shared queue is up to the broker: a node may
take more than its share. The gate caps the batch turns running at once on
this node at ``batch_limit(N)`` (N minus a reserve of half, at least one);
a batch message beyond that is rejected with ``requeue=True`` *before* the turn
is claimed, so it goes back to the end of its queue for a node with room, and
this node keeps a thread for interactive turns. (With the scheduler's own
limit this is rare: a requeued message alone in a direct queue comes back to
the same node until a batch thread frees, so each rejection pauses briefly.)

It also honours ``TurnJob.close_after`` (a batch job's one-turn session):
after the turn, the session's sandbox is destroyed at once, without a
snapshot, and its lease released: it never waits for the reaper.

Where the worker calls it (``worker/tasks.py``, the task body)::

    from worker.turns.entry import run_turn

    @app.task(name=names.TASK_TURN, acks_late=True, ignore_result=False)
    def turn(job: dict[str, Any]) -> dict[str, Any]:
        node = get_node()
        outcome = run_turn(node.executor, node.residency, TurnJob.model_validate(job))
        return outcome.model_dump(mode="json")

The node's thread count is read from Celery's ``worker_init`` signal (connected
when this module is imported, i.e. with ``worker.tasks``); ``configure`` sets it
explicitly.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from celery import signals
from celery.exceptions import Reject

from sandgrid.wire.batch_limit import batch_limit
from sandgrid.wire.jobs import TurnJob, TurnOutcome

__all__ = [
    "DEFAULT_CONCURRENCY",
    "REJECT_PAUSE_S",
    "BatchGate",
    "SessionCloser",
    "TurnRunner",
    "configure",
    "gate",
    "run_turn",
]

log = logging.getLogger(__name__)

#: Thread count assumed until Celery says otherwise (``sandgrid worker`` default).
DEFAULT_CONCURRENCY = 4
#: Pause before a rejected batch message goes back: alone in its queue it comes
#: straight back to this node, and the pause bounds that loop (measured without
#: it: ~200 rejections/s) at the cost of at most this delay for an interactive
#: message arriving meanwhile.
REJECT_PAUSE_S = 0.025


class TurnRunner(Protocol):
    """Runs one turn (``worker.turns.executor.Executor``)."""

    def run(self, job: TurnJob) -> TurnOutcome: ...


class SessionCloser(Protocol):
    """Lets a session go from this node (``worker.turns.residency.Residency``)."""

    def close(self, session_id: str) -> None: ...


class BatchGate:
    """At most ``limit`` batch turns at once on this node; interactive turns pass.

    Args:
        concurrency: the node's worker threads.
    """

    def __init__(self, concurrency: int = DEFAULT_CONCURRENCY) -> None:
        self._cond = threading.Condition()
        self.running = 0
        self.rejected = 0
        self.limit = batch_limit(concurrency)
        #: The node's task threads (``worker.tasks.note_received`` reads it).
        self.threads = concurrency

    def resize(self, concurrency: int) -> None:
        with self._cond:
            self.limit = batch_limit(concurrency)
            self.threads = concurrency

    def try_enter(self, job: TurnJob) -> bool:
        """Take a batch slot for ``job`` (always True for an interactive turn)."""
        if not job.batch:
            return True
        with self._cond:
            if self.running >= self.limit:
                self.rejected += 1
                return False
            self.running += 1
            return True

    def leave(self, job: TurnJob) -> None:
        if not job.batch:
            return
        with self._cond:
            self.running = max(0, self.running - 1)


gate = BatchGate()


def configure(concurrency: int) -> None:
    """Size the gate for a node of ``concurrency`` threads."""
    gate.resize(concurrency)
    log.info("batch gate: %d of %d threads for batch turns", gate.limit, concurrency)


@signals.worker_init.connect(weak=False)
def _on_worker_init(sender: object = None, **_: Any) -> None:
    concurrency = getattr(sender, "concurrency", None)
    if isinstance(concurrency, int) and concurrency > 0:
        configure(concurrency)


def run_turn(executor: TurnRunner, closer: SessionCloser, job: TurnJob) -> TurnOutcome:
    """Run one turn through the gate (the body of the Celery task).

    Args:
        executor: runs the turn.
        closer: destroys a one-turn session's sandbox after it (``close_after``).
        job: the turn.

    Raises:
        Reject: a batch turn while the node's batch threads are all busy; Celery
            puts the message back on its queue (the turn was not claimed).
    """
    if not gate.try_enter(job):
        time.sleep(REJECT_PAUSE_S)
        raise Reject(f"batch gate full ({gate.limit} batch turns running)", requeue=True)
    try:
        outcome = executor.run(job)
    finally:
        gate.leave(job)
    if job.close_after:
        closer.close(job.session.id)
    return outcome
