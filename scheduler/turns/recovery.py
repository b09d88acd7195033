"""A turn that got no outcome: its worker was lost, or its deadline passed.

``TurnRecovery`` is a collaborator of ``scheduler.turns.runner.TurnRunner``
(see that module's docstring for the whole flow). It decides, from the
registry's records, what becomes of such a turn: the next attempt to send when
that cannot run it twice on one workspace, else a clear 503 that says whether
it ran. It sends nothing and waits for nothing: the runner does both, so the
two never call back into each other.

A resend is not always the last word (``on_refused``, issue 22.5): when Redis
fails over for longer than the node TTL, a live node's heartbeat lapses, the
turn it runs is sent again, and the copy is refused by that node's lease
(``session_busy``, ``ran: false``) while the first copy runs on. The refusal
then proves the node lives: the turn is its earlier attempt again, and the
runner waits for that attempt's result instead of answering "did not run".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NoReturn

from sandgrid.errors import ErrorCode, InfrastructureError
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.registry.sessions import SessionRegistry
from scheduler.turns.watch import Lost

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_RUNS",
    "Earlier",
    "TurnRecovery",
    "refused_by_lease",
    "timeout_of",
]

log = logging.getLogger(__name__)

#: Runs of one turn at most: the first, and one more after its worker died.
MAX_RUNS = 2
#: Sends of one turn at most: a message held by a process that died before it
#: ran the turn is sent again without counting as a run.
MAX_ATTEMPTS = 4


@dataclass(frozen=True)
class Earlier:
    """The attempt before a resend, kept until the resend answers (``on_refused``).

    Attributes:
        job: that attempt.
        handle: the dispatcher's handle on its result (forgotten only once the
            resend's answer stands).
        queue: where it was sent.
        lost: the process it depended on, taken for lost.
    """

    job: TurnJob
    handle: Any
    queue: str
    lost: Lost


class TurnRecovery:
    """What becomes of a turn whose worker was lost or whose deadline passed.

    Args:
        registry: the session registry (the turn's record and the session's).
    """

    def __init__(self, registry: SessionRegistry) -> None:
        self.registry = registry

    def on_worker_lost(self, job: TurnJob, node: str, *, holder: str = "") -> TurnJob | None:
        """The process holding the turn (or the queue it was on) is gone.

        Exactly one run per turn on a workspace: the turn is sent again
        (``attempt + 1``) to the session's owner if it lives (a node restarted
        under the same name holds its leases), else to the shared queue of its
        type, where another worker restores the session's last snapshot, the
        one taken before this turn, and runs it. The older attempt can no longer
        be claimed (``requeue_turn``). When the session's record shows that the
        turn did complete (its worker died after saving the snapshot but before
        reporting), that the workspace had changes no snapshot holds
        (``unsaved``), that the turn started and a snapshot was taken since it
        was sent (``overlapped``: another turn of the session ended while this
        one ran, so that snapshot may hold part of it; the error says
        ``ran: null, overlapped: true``), or that the turn ran
        ``MAX_RUNS`` times already, it is not run again: the caller gets a
        clear 503 instead.

        Args:
            job: the attempt that was lost.
            node: the node that is gone (named in the error).
            holder: the incarnation the turn record named ('' for none).

        Returns:
            The next attempt, for the runner to send (its session as the registry
            has it now); None when a live process took the turn meanwhile (keep
            waiting for the old one).

        Raises:
            InfrastructureError: ``worker_lost``, when the turn cannot be re-run
                (it is abandoned: a late redelivery is refused).
        """
        fresh = self.registry.get_any(job.session.id)
        runs = int(self.registry.turn_state(job.turn_id).get("runs") or 0)
        completed = fresh is not None and fresh.last_turn == job.turn_id
        unsaved = fresh is not None and fresh.unsaved
        # A snapshot since it was sent may hold part of it, if it started (runs > 0).
        overlapped = fresh is not None and fresh.snapshot != job.session.snapshot and runs > 0
        verdict = "final"
        may_run = not (completed or unsaved or overlapped or fresh is None) and runs < MAX_RUNS
        if may_run and job.attempt < MAX_ATTEMPTS:
            verdict = self.registry.requeue_turn(job.turn_id, job.attempt, holder)
        if verdict == "held":
            return None
        if verdict != "requeued" or fresh is None:
            self.registry.abandon_turn(job.turn_id)
            raise _lost(job, node, completed, unsaved, overlapped)
        log.info(
            "turn %s: node %s taken for lost; attempt %d sent", job.turn_id, node, job.attempt + 1
        )
        return job.model_copy(update={"attempt": job.attempt + 1, "session": fresh})

    def on_refused(self, retry: TurnJob, outcome: TurnOutcome, lost: Lost) -> bool:
        """Whether the earlier attempt is the turn again, after ``retry`` (sent
        because ``lost`` seemed gone) answered ``outcome``.

        It is when ``retry`` was refused by the session's lease (``session_busy``
        naming its owner) and that owner is the very process taken for lost: same
        node, beating again with the same incarnation. That process holds the
        session and claimed the earlier attempt, so it runs or ran it (a Redis
        failover longer than the node TTL made its heartbeat lapse, not its
        death). The refusal is then no answer ("did not run" would be false): the
        refuser's claim is undone and the record names the holder again
        (``reclaim_turn``), for the runner to wait on the earlier attempt's result
        and watch the holder as before. Anything else is the turn's answer.

        Args:
            retry: the attempt that answered.
            outcome: its answer.
            lost: the process the attempt before it depended on.
        """
        owner = refused_by_lease(outcome)
        if not owner or owner != lost.node or not lost.holder or retry.attempt < 2:
            return False
        record = self.registry.node_record(lost.node)
        if record is None or record.inc != lost.holder:
            return False  # the holder is gone, or restarted: its attempt died with it
        if not self.registry.reclaim_turn(
            retry.turn_id, retry.attempt, outcome.node, lost.node, lost.holder
        ):
            return False
        log.warning(
            "turn %s: attempt %d refused by the lease of node %s, which lives (taken for "
            "lost): waiting for its earlier attempt",
            retry.turn_id,
            retry.attempt,
            lost.node,
        )
        return True

    def on_turn_timeout(self, job: TurnJob, ttl: float) -> NoReturn:
        """No outcome within the deadline plus margin: abandon the turn, answer 503.

        Raises:
            InfrastructureError: ``turn_timeout``, saying whether the turn ran.
        """
        self.registry.abandon_turn(job.turn_id)
        context: dict[str, Any] = {"turn": job.turn_id, "session": job.session.id, "waited_s": ttl}
        # Abandoned before any worker claimed it: no worker ever will, so it did not run.
        # Claimed: it started, and whether it finished is not known here.
        started = int(self.registry.turn_state(job.turn_id).get("runs") or 0) > 0
        if not started:
            context["ran"] = False
        else:  # it ran to its end if the session records it (its result was lost)
            fresh = self.registry.get_any(job.session.id)
            if fresh is not None and fresh.last_turn == job.turn_id:
                context["ran"] = True
        raise InfrastructureError(
            f"no outcome for turn {job.turn_id} within {ttl:.1f}s ("
            + (
                "it started and overran its deadline"
                if started
                else "no worker took it; it did not run"
            )
            + ")",
            code=ErrorCode.TURN_TIMEOUT,
            operation=job.op.kind,
            context=context,
            retryable=False,
        )


def refused_by_lease(outcome: TurnOutcome) -> str:
    """The node whose lease refused the turn (``session_busy`` naming its owner), or ''."""
    error = outcome.error or {}
    if outcome.ok or error.get("code") != ErrorCode.SESSION_BUSY.value:
        return ""
    return str((error.get("context") or {}).get("owner") or "")


def timeout_of(job: TurnJob) -> float | None:
    """The exec's own deadline, if the turn is an exec that set one."""
    return job.op.request.timeout_s if isinstance(job.op, ExecOp) else None


def _lost(
    job: TurnJob, node: str, completed: bool, unsaved: bool = False, overlapped: bool = False
) -> InfrastructureError:
    context: dict[str, Any] = {"node": node, "turn": job.turn_id, "session": job.session.id}
    context["ran"] = completed
    if completed:
        why = "the turn completed and was saved, but its result was lost with the worker"
    elif overlapped:
        why = (
            "the turn was not run again because a snapshot was taken while it ran (another "
            "turn of the session ended meanwhile) and may hold part of it; the session "
            "continues from that snapshot"
        )
        context["ran"] = None  # not known: part of it may be in the snapshot
        context["overlapped"] = True
    elif unsaved:
        why = (
            "the turn was not run again because the workspace had changes that no "
            "snapshot holds; the session continues from its last snapshot"
        )
    else:
        why = "the turn did not complete; the session continues from its last snapshot"
    return InfrastructureError(
        f"worker {node!r} stopped heartbeating during turn {job.turn_id}: {why}",
        code=ErrorCode.WORKER_LOST,
        operation=job.op.kind,
        context=context,
        retryable=False,
    )
