"""The flow of one turn on the scheduler side.

    lookup -> route -> backpressure -> tenant slot -> session slot (wait in order)
    -> send -> wait (watching the worker's heartbeat) -> release -> outcome
    (backpressure, tenant slot and session slot are one round trip: ``Admission.admit``)

A session runs up to ``quotas.max_parallel_turns`` turns at once; a call beyond
that waits in order for a slot, for a bounded time, then gets 429
``session_busy`` (``scheduler.turns.slots``). Pause, restore and checkpoint
take the session alone, after the running turns; a close cancels them first.

A type that no live worker serves is refused at once (503 ``no_capacity``).
While waiting, the runner watches the process that holds the turn (it reserved
or claimed the message), else the node whose direct queue has it, else the
processes serving its type (``scheduler.turns.watch``). When that process is
gone (its heartbeat lapsed, or its node restarted as a new incarnation) before
an outcome arrives, ``TurnRecovery`` (``scheduler.turns.recovery``) decides,
and the runner sends the turn again, to the session's owner if it lives, else
to its type's shared queue, where a worker restores the session's last
snapshot: at most ``MAX_RUNS`` runs of a turn, never two on one workspace.
When that is not safe, the turn is abandoned (a late redelivery is refused by
``claim_turn``) and the caller gets 503 ``worker_lost``. A resend refused by
the lease of the very process taken for lost (it only looked dead: a Redis
failover outlasted its heartbeat) is no answer: the runner waits for the
earlier attempt's result again (``TurnRecovery.on_refused``).

An exec with an idempotency key runs as the turn whose id the key names
(``scheduler.turns.idempotency``): a retry finds the first one's outcome, or
waits for it while it is in flight, and never sends the turn again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.exceptions

from sandgrid.errors import (
    SandgridError,
    error_from_body,
)
from sandgrid.models import ExecRequest, ExecResult, SessionInfo, WireModel
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.jobs import TurnJob, TurnOp, TurnOutcome, expect
from scheduler import metrics
from scheduler.audit.log import AuditLog
from scheduler.registry.sessions import SessionRegistry, new_turn_id
from scheduler.tenants import Tenant
from scheduler.turns.admission import Admission, check_exec
from scheduler.turns.cancel import TurnCancels
from scheduler.turns.closing import SessionCloser, closed_error, refuse_ended
from scheduler.turns.dispatch import Dispatcher, result_key
from scheduler.turns.idempotency import (
    IdempotencyStore,
    TakeOver,
    done_record,
    fingerprint,
    turn_id_for,
)
from scheduler.turns.recovery import TurnRecovery
from scheduler.turns.slots import EXCLUSIVE_KINDS, SessionSlots
from scheduler.turns.waiting import TurnWaiting
from scheduler.turns.watch import RESTART_GRACE_S

__all__ = [
    "TurnDone",
    "TurnRunner",
]

R = TypeVar("R", bound=WireModel)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnDone:
    """A finished turn: the worker's outcome and the scheduler's timings (ms)."""

    outcome: TurnOutcome
    timings: dict[str, float] = field(default_factory=dict)


class TurnRunner:
    """Runs turns for the API: every step of the flow above, in one place.

    Every part it uses is given here (``scheduler.api.deps`` wires them).

    Args:
        registry: the session registry.
        admission: queue-depth and tenant slot checks.
        dispatcher: sends jobs and waits for outcomes.
        recovery: decides what becomes of a turn whose worker was lost or whose
            deadline passed (``scheduler.turns.recovery``).
        idempotency: an exec's idempotency keys (``scheduler.turns.idempotency``).
        cancels: cancels turns by id (``scheduler.turns.cancel``); a close
            during a turn uses it too.
        audit: where finished turns and closes are recorded
            (``scheduler.audit.log``); None: nowhere.
        on_interactive: called at the start of every turn that is not a batch
            turn: batches in this process yield while interactive traffic flows
            (``scheduler.batch.capacity``).
        turn_margin_s: wait beyond the exec deadline (queue, restore, snapshot).
        lost_check_s: how often the waiter checks the worker's heartbeat.
        restart_grace_s: see ``scheduler.turns.watch.RESTART_GRACE_S`` (the API
            gives 3 heartbeats of the grid).
        slot_wait_s: how long a call waits for a slot of its session
            (``scheduler.turns.slots``).
    """

    def __init__(
        self,
        registry: SessionRegistry,
        admission: Admission,
        dispatcher: Dispatcher,
        *,
        recovery: TurnRecovery,
        idempotency: IdempotencyStore,
        cancels: TurnCancels,
        audit: AuditLog | None = None,
        on_interactive: Callable[[], None] | None = None,
        turn_margin_s: float = 30.0,
        lost_check_s: float = 0.25,
        restart_grace_s: float = RESTART_GRACE_S,
        slot_wait_s: float = 30.0,
    ) -> None:
        self.registry = registry
        self.admission = admission
        self.dispatcher = dispatcher
        self.recovery = recovery
        self.idempotency = idempotency
        self.cancels = cancels
        self.audit = audit
        self.on_interactive = on_interactive
        self.turn_margin_s = turn_margin_s
        self.lost_check_s = lost_check_s
        self.restart_grace_s = restart_grace_s
        self.slots = SessionSlots(registry, admission, slot_wait_s)

    def exec(
        self,
        tenant: Tenant,
        session_id: str,
        request: ExecRequest,
        *,
        t0: float | None = None,
        idempotency_key: str | None = None,
        turn_id: str | None = None,
    ) -> ExecResult:
        """Run one command; a non-zero exit is a result, not an error.

        With ``idempotency_key`` (checked by the caller), the command runs at most
        once for all requests with that key (see ``scheduler.turns.idempotency``).
        ``turn_id`` is the turn's id when the caller chose it (a streamed exec
        names its turn before it starts, for cancel and re-attach).

        Raises:
            InvalidInput: the key was used for another request (``idempotency_key_reused``).
            SandgridError: the subclass the turn's error body names.
        """
        check_exec(tenant, request)
        session = self.registry.get(tenant.name, session_id, brief=True)
        op = ExecOp(request=request)
        if idempotency_key is None:
            done = self.run(
                tenant, session, op, timeout_s=request.timeout_s, t0=t0, turn_id=turn_id
            )
        else:
            done = self._keyed(tenant, session, op, idempotency_key, t0)
        result = expect(done.outcome, ExecResult, "exec")
        sandbox_ms = done.outcome.timings.get("sandbox_ms", result.duration_ms)
        timings = {**result.timings, **done.outcome.timings, **done.timings}
        timings["sandbox_ms"] = round(sandbox_ms, 3)
        return result.model_copy(update={"timings": timings, "node": done.outcome.node})

    def _keyed(
        self, tenant: Tenant, session: SessionInfo, op: ExecOp, key: str, t0: float | None
    ) -> TurnDone:
        """The turn of a keyed exec: run it once, or answer the first run's outcome."""
        t0 = time.perf_counter() if t0 is None else t0
        turn_id = turn_id_for(tenant.name, session.id, key)
        ttl = (op.request.timeout_s or session.quotas.timeout_s) + self.turn_margin_s
        found = self.idempotency.reserve(turn_id, fingerprint(op), ttl + self.turn_margin_s)
        if found.state == "mismatch":
            raise self.idempotency.mismatch(key)
        if found.state != "new":
            job = TurnJob(turn_id=turn_id, session=session, op=op)
            try:
                outcome = found.outcome or self.idempotency.attach(
                    self.dispatcher, self.registry, job, ttl, self.lost_check_s
                )
            except TakeOver:
                return self._keyed_run(tenant, session, op, turn_id, t0)
            self._end_found(tenant, job)
            if not outcome.ok:
                raise error_from_body(outcome.error or {})
            return TurnDone(outcome, _timings(t0, 0.0, outcome))
        return self._keyed_run(tenant, session, op, turn_id, t0)

    def _end_found(self, tenant: Tenant, job: TurnJob) -> None:
        """End a keyed turn whose outcome a retry found. Its sender may not have:
        one whose Redis failed over while it waited answered 503 and could not write
        the end, and the turn's slots would keep the session busy (a close refused)
        until their deadline. Ending an ended turn changes nothing."""
        self.registry.finish_turn(job.session.id, job.turn_id, tenant.name)

    def _keyed_run(
        self, tenant: Tenant, session: SessionInfo, op: ExecOp, turn_id: str, t0: float
    ) -> TurnDone:
        """Run the turn of a key this request holds; keep its outcome under the key."""
        try:
            done = self.run(
                tenant,
                session,
                op,
                timeout_s=op.request.timeout_s,
                t0=t0,
                turn_id=turn_id,
                settle=True,
            )
        except SandgridError as exc:
            self.idempotency.failed(turn_id, fingerprint(op), exc)
            raise
        return done  # its outcome was kept under the key as the turn ended (_end)

    def op(
        self,
        tenant: Tenant,
        session_id: str,
        op: TurnOp,
        model: type[R],
        *,
        t0: float | None = None,
    ) -> R:
        """Run a file operation (write, read, list, delete, tar); its result, a ``model``."""
        session = self.registry.get(tenant.name, session_id, brief=True)
        done = self.run(tenant, session, op, timeout_s=None, t0=t0)
        return expect(done.outcome, model, op.kind)

    def run(
        self,
        tenant: Tenant,
        session: SessionInfo,
        op: TurnOp,
        *,
        timeout_s: float | None,
        t0: float | None = None,
        batch: bool = False,
        close_after: bool = False,
        turn_id: str | None = None,
        settle: bool = False,
    ) -> TurnDone:
        """One turn of ``session``, end to end.

        ``batch`` routes a session that is not live to its type's batch queue;
        ``close_after`` asks the worker to destroy the sandbox after the turn
        (a batch job's one-turn session; see ``TurnJob.close_after``);
        ``turn_id`` is the turn's id when the caller chose it (a keyed exec);
        ``settle`` keeps a successful outcome under the turn's idempotency key
        (``IdempotencyStore.settle``) in the same round trip that ends the turn.

        Raises:
            Conflict: the session is closed.
            LimitExceeded: backpressure, the tenant's turns in flight, or no slot
                of the session in time (``session_busy``).
            InfrastructureError: the worker was lost, or the turn timed out.
            SandgridError: the error the worker reported for the turn.
        """
        t0 = time.perf_counter() if t0 is None else t0
        if not batch and self.on_interactive is not None:
            self.on_interactive()
        refuse_ended(session, op.kind)
        ttl = (timeout_s or session.quotas.timeout_s) + self.turn_margin_s
        self.admission.check_capacity(session.type, op.kind)
        job = TurnJob(
            turn_id=turn_id or new_turn_id(),
            session=session,
            op=op,
            batch=batch,
            close_after=close_after,
        )
        job, queue = self._admit(tenant, job, ttl, t0)
        try:
            outcome, wait_ms = self._locked(tenant, job, queue, ttl, settle=settle)
        except SandgridError as exc:
            self._finished(job, None, exc, _timings(t0, 0.0, None))
            raise
        timings = _timings(t0, wait_ms, outcome)
        self._finished(job, outcome, None, timings)
        if not outcome.ok:
            raise error_from_body(outcome.error or {})
        # The worker counts the turn and stores its snapshot (record_turn) before
        # it reports, so the next turn can run anywhere.
        return TurnDone(outcome, timings)

    def _admit(self, tenant: Tenant, job: TurnJob, ttl: float, t0: float) -> tuple[TurnJob, str]:
        """Take a turn slot of the tenant and the session: the job as it runs, and its queue.

        A turn that waited for its slot runs on the session as it is now (and is
        refused if the session closed meanwhile).
        """
        session, kind = job.session, job.op.kind
        try:
            admitted = self.slots.enter(tenant, session, kind, job.turn_id, ttl, batch=job.batch)
        except SandgridError as exc:
            self._finished(job, None, exc, _timings(t0, 0.0, None))
            raise
        if admitted.session is not session:  # it waited: the session as it is now
            job = job.model_copy(update={"session": admitted.session})
            if admitted.session.state == "closed":
                self.registry.end_turn(session.id, job.turn_id)
                self.admission.release_turn(tenant, job.turn_id)
                raise closed_error(session.id, kind)
        return job, admitted.queue

    def _finished(
        self,
        job: TurnJob,
        outcome: TurnOutcome | None,
        error: SandgridError | None,
        timings: dict[str, float],
    ) -> None:
        """A turn's end, once per turn: its metrics, and its audit record."""
        if error is not None:
            result = error.code.value
        else:
            assert outcome is not None
            result = "ok" if outcome.ok else str((outcome.error or {}).get("code"))
        metrics.observe_turn(job.session.type, job.op.kind, result, timings)
        if self.audit is not None:
            self.audit.turn(job, outcome, error, timings["total_ms"])

    def close(self, tenant: Tenant, session_id: str) -> SessionInfo:
        """Close a session (``scheduler.turns.closing``), over this runner's parts.

        Raises:
            NotFound: unknown session. Conflict: its turns did not end in time.
        """
        closer = SessionCloser(
            self.registry, self.cancels, self.dispatcher, self.audit, self.turn_margin_s
        )
        return closer.close(tenant, session_id)

    def _locked(
        self, tenant: Tenant, job: TurnJob, queue: str, ttl: float, *, settle: bool = False
    ) -> tuple[TurnOutcome, float]:
        """Send and wait under the session's turn lock and the tenant's slot
        (``Admission.admit`` took both); release them; the wait in ms."""
        try:
            t_send = time.perf_counter()
            handle = self.dispatcher.send(job, queue, expires=ttl)
            outcome = self._waiting().wait(job, handle, queue, ttl)
            wait_ms = (time.perf_counter() - t_send) * 1000
        except BaseException:
            self._give_back(tenant, job)
            raise
        self._end(tenant, job, handle, outcome if settle and outcome.ok else None)
        return outcome, wait_ms

    def _waiting(self) -> TurnWaiting:
        """The wait of a turn, over the parts this runner has now."""
        return TurnWaiting(
            self.registry,
            self.admission.nodes,
            self.dispatcher,
            self.recovery,
            lost_check_s=self.lost_check_s,
            restart_grace_s=self.restart_grace_s,
            turn_margin_s=self.turn_margin_s,
        )

    def _give_back(self, tenant: Tenant, job: TurnJob) -> None:
        """Give back the slots of a turn that did not answer. With Redis away (a
        failover) the turn's own error stays the answer, with what it says of the
        run: the slots lapse at their deadline, or the keyed retry that finds the
        outcome ends them (``_end_found``)."""
        try:
            try:
                self.registry.end_turn(job.session.id, job.turn_id)
            finally:
                self.admission.release_turn(tenant, job.turn_id)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            log.warning("turn %s: its slots were not given back: %s", job.turn_id, exc)

    def _end(self, tenant: Tenant, job: TurnJob, handle: Any, settle: TurnOutcome | None) -> None:
        """The writes that end a turn that answered, in one round trip
        (``SessionRegistry.finish_turn``): its lock, its slot, its Celery result, and
        ``settle`` under its idempotency key."""
        key = result_key(self.dispatcher, handle, self.registry.redis)
        if key is None:
            self.dispatcher.forget(handle)
        self.registry.finish_turn(
            job.session.id,
            job.turn_id,
            tenant.name,
            result_key=key,
            settled=(
                done_record(fingerprint(job.op), settle.model_dump_json())
                if settle is not None
                else ""
            ),
            keep_s=self.idempotency.ttl_s,
            alone=job.op.kind in EXCLUSIVE_KINDS,
        )


def _timings(t0: float, wait_ms: float, outcome: TurnOutcome | None) -> dict[str, float]:
    """api_ms (scheduler), queue_ms (broker + result transport), worker_ms, total_ms."""
    total_ms = (time.perf_counter() - t0) * 1000
    worker_ms = outcome.timings.get("worker_ms", 0.0) if outcome is not None else 0.0
    return {
        "api_ms": round(total_ms - wait_ms, 3),
        "queue_ms": round(max(0.0, wait_ms - worker_ms), 3),
        "worker_ms": round(worker_ms, 3),
        "total_ms": round(total_ms, 3),
    }
