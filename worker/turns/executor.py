"""One turn, start to end: claim -> lease -> sandbox (+restore) -> op -> snapshot.

The executor is the only place that knows the order of a turn's steps; the
Celery task around it is a thin shell (``worker.tasks``) and every step below is
a call into its own module (registry, pool, backend, snapshot policy).

Why snapshot before reporting: with the default policy ``after_turn`` the
turn's result is only returned once its workspace is safe in the store, so the
next turn can run on any worker, and a worker that dies mid-turn leaves the
snapshot of the turn before it, from which the turn can run again exactly once
(``worker.turns.snapshot_policy`` decides when a snapshot is taken).

A session's turns run at once here (the scheduler admits up to its
``max_parallel_turns``): they share the session's gate (``worker.sessions.gate``);
of those that find the session absent at once, one leases and restores it
(``SessionTable.arrival``) and the others then run in the sandbox it made. Each
request to the agent is tagged with its turn (``TURN_TAG``), so a cancel finds
the exec of its turn among the others.

The op itself is its handler's (``worker.ops``), found by the op's kind in the
registry; the handler's type says whether the op needs the session's sandbox
(exec, files, code, pty, a process start) or not (close, fork, the lifecycle
ops, the quick process ops), and only the first bring the session here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sandgrid.errors import Conflict, ErrorCode, InfrastructureError, SandboxLost, SandgridError
from sandgrid.models import SessionInfo
from sandgrid.wire.jobs import TurnJob, TurnOutcome, TurnResult
from sandgrid.wire.ledger import Claim
from worker.agent_client.client import TURN_TAG
from worker.ops.base import NodeHandler, NodeParts, SandboxContext, SandboxHandler, TurnContext
from worker.ops.registry import OPS, OpRegistry
from worker.sessions.gate import Share
from worker.sessions.pool_protocol import SandboxPool
from worker.sessions.table import LocalSession
from worker.turns import memory
from worker.turns.ran import RanTurns
from worker.turns.snapshot_policy import unsaved_result

__all__ = [
    "Executor",
]

log = logging.getLogger(__name__)


class _AlreadyRan(Exception):
    """This process ran the turn already (an earlier attempt): its outcome."""

    def __init__(self, outcome: TurnOutcome) -> None:
        super().__init__(outcome.turn_id)
        self.outcome = outcome


@dataclass
class _Turn:
    """Timings of one turn, in milliseconds."""

    started: float
    marks: dict[str, float]
    applied: bool = False
    """The op ran to its end in the sandbox (an error after it: the turn ran)."""

    def mark(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.marks[name] = round((now - since) * 1000, 3)
        return now


@dataclass(frozen=True)
class Executor:
    """Runs turns for the node.

    Attributes:
        node: the node's name (it claims turns and holds leases as this name).
        pool: where a session's sandbox comes from.
        parts: the node's parts the turn and its op use (the session ledger for
            turn claims, leases and records; the session table; the snapshot
            policy; residency; the backend of a sandbox type; the exec control
            and the terminal bridge).
        incarnation: this process's id, named in its claims (see ``NodeRecord``).
        ran: the turns this process ran lately (``worker.turns.ran``).
        ops: the op handlers by kind (``worker.ops.registry``).
    """

    node: str
    pool: SandboxPool
    parts: NodeParts
    incarnation: str = ""
    ran: RanTurns = field(default_factory=RanTurns)
    ops: OpRegistry = OPS

    # ---- the turn --------------------------------------------------------------

    def run(self, job: TurnJob) -> TurnOutcome:
        """Run one turn and report it; never raises for a turn's own failure.

        A turn this process already ran (an attempt sent again because the API
        took this node for dead) is answered with that run's outcome.
        """
        turn = _Turn(time.perf_counter(), {})
        tag = TURN_TAG.set(job.turn_id)
        try:
            return self._claimed(job, turn)
        finally:
            TURN_TAG.reset(tag)

    def _claimed(self, job: TurnJob, turn: _Turn) -> TurnOutcome:
        """Claim the turn, then run it; an attempt that ran here already answers its
        outcome. An exec is in the node's table of cancellable turns from before its
        claim, which tells the table whether it was cancelled already."""
        control = self.parts.control
        if control is None or job.op.kind != "exec":
            return self._claim(job, turn)
        with control.entered(job.turn_id, job.session.id):
            return self._claim(job, turn)

    def _claim(self, job: TurnJob, turn: _Turn) -> TurnOutcome:
        ledger, control = self.parts.ledger, self.parts.control
        claim = ledger.claim_turn(job.turn_id, self.node, job.attempt, self.incarnation)
        if control is not None and claim:
            control.claimed(job.turn_id, cancelled=claim == Claim.CANCELLED)
        if not claim:
            log.info("turn %s: already claimed, abandoned or done; skipped", job.turn_id)
            err = InfrastructureError(
                "turn was abandoned or already ran", code=ErrorCode.WORKER_LOST
            )
            return self._failed(job, err, turn)
        try:
            outcome = self._run(job, turn)
        except _AlreadyRan as ran:
            log.warning("turn %s: attempt %d ran here already", job.turn_id, job.attempt)
            return ran.outcome
        if turn.applied:
            self.ran.put(outcome)
        return outcome

    def _run(self, job: TurnJob, turn: _Turn) -> TurnOutcome:
        """The op's handler, with the session's sandbox when it needs one; a failure
        of the turn is its outcome."""
        if (done := self.ran.get(job.turn_id)) is not None:
            raise _AlreadyRan(done)
        try:
            handler = self.ops.handler(job.op.kind)
            if isinstance(handler, NodeHandler):
                snapshot = None
                result = handler.run(TurnContext(self.node, job, self.parts), job.op)
            else:
                local, result = self._turn(job, turn, handler)
                snapshot = local.snapshot
        except SandgridError as exc:
            return self._failed(job, exc, turn)
        except _AlreadyRan:
            raise
        except Exception as exc:  # a bug must still answer the caller
            log.exception("turn %s failed unexpectedly", job.turn_id)
            return self._failed(job, SandgridError(f"internal error: {exc}"), turn)
        turn.mark("worker_ms", turn.started)
        return TurnOutcome(
            turn_id=job.turn_id,
            node=self.node,
            ok=True,
            result=result,
            snapshot=snapshot,
            timings=turn.marks,
        )

    def _turn(
        self, job: TurnJob, turn: _Turn, handler: SandboxHandler[Any]
    ) -> tuple[LocalSession, TurnResult]:
        """Run the op in the session's sandbox, snapshot as the policy says, record it.

        An op that ran but whose snapshot failed is a result all the same,
        marked ``saved: false`` (``unsaved_result``); the turn is counted and the
        session recorded ``unsaved``.

        Raises:
            SandgridError: the op failed.
        """
        policy = self.parts.persistence
        with self._entered(job, turn) as (local, share):
            if (done := self.ran.get(job.turn_id)) is not None:  # ran while we waited
                raise _AlreadyRan(done)
            t = time.perf_counter()
            policy.before_turn(local, job.op.kind, mutates=handler.mutates, alone=share.first)
            try:
                result = self._apply(local, job, handler)
            finally:
                policy.ended(local, mutates=handler.mutates)
            turn.applied = True
            t = turn.mark("sandbox_ms", t)
            with local.saving:  # snapshots, and the records naming them, in order
                try:
                    policy.after_turn(local, mutates=handler.mutates, solo=local.gate.solo(share))
                except SandgridError as exc:
                    log.warning("turn %s ran but was not saved: %s", job.turn_id, exc)
                    result = unsaved_result(exc, result)
                finally:
                    turn.mark("snapshot_ms", t)
                self._record(job, local)
        return local, result

    @contextlib.contextmanager
    def _entered(self, job: TurnJob, turn: _Turn) -> Iterator[tuple[LocalSession, Share]]:
        """The session's sandbox with this turn inside its gate.

        The idle reaper may release the session between the lookup and the gate
        (it takes the gate alone when no turn is inside); then the session is
        brought back, once, rather than the turn running in a released sandbox.
        """
        for _ in range(2):
            local = self._session_for(job, turn)
            with local.gate.turn() as share:
                if self._resident(job.session.id) is local:
                    yield local, share
                    return
        raise SandboxLost(
            f"session {job.session.id} was released twice while the turn waited",
            operation=job.op.kind,
            context={"session": job.session.id},
        )

    def _failed(self, job: TurnJob, exc: SandgridError, turn: _Turn) -> TurnOutcome:
        turn.mark("worker_ms", turn.started)
        # Whether the turn ran, as its workspace will show: an op that failed or broke
        # its sandbox did not (the session goes on from the snapshot before it).
        exc.context.setdefault("ran", turn.applied)
        body = exc.to_body()["error"]
        return TurnOutcome(
            turn_id=job.turn_id, node=self.node, ok=False, error=body, timings=turn.marks
        )

    # ---- the session's sandbox ----------------------------------------------------

    def _session_for(self, job: TurnJob, turn: _Turn) -> LocalSession:
        """The local sandbox of the session: here already, or leased and restored."""
        local = self._resident(job.session.id)
        if local is not None:
            # Ours already: the heartbeat renews the lease and drops the session
            # here if the lease was ever lost, so no round trip on the hot path.
            return local
        with self.parts.sessions.arrival(job.session.id):
            # Another turn of the session may have brought it while this one waited.
            return self._resident(job.session.id) or self._arrive(job, turn)

    def _resident(self, sid: str) -> LocalSession | None:
        """The session's usable sandbox here; a lost one is discarded (None)."""
        local = self.parts.sessions.get(sid)
        if local is not None and local.sandbox.state not in ("lost", "error", "destroyed"):
            return local
        if local is not None:  # its sandbox was lost: start again from the snapshot
            self.parts.residency.discard(local)
        return None

    def _arrive(self, job: TurnJob, turn: _Turn) -> LocalSession:
        """Lease the session and restore it into a warm sandbox here."""
        sid, node, parts = job.session.id, self.node, self.parts
        t = time.perf_counter()
        if not parts.ledger.acquire_lease(sid, node):
            owner = parts.ledger.lease_owner(sid)
            raise Conflict(
                f"session {sid} is held by node {owner}",
                code=ErrorCode.SESSION_BUSY,
                operation="turn",
                context={"owner": owner},
                retryable=True,
            )
        t = turn.mark("lease_ms", t)
        try:
            info = parts.ledger.get_any(sid) or job.session
            if info.state == "closed":
                raise Conflict(
                    f"session {sid} is closed", code=ErrorCode.SESSION_CLOSED, operation="turn"
                )
            with parts.sessions.restoring(sid):  # its lease is renewed meanwhile
                local = self._materialise(info)
            if parts.control is not None:  # a cancel meanwhile may have gone to no node
                parts.control.arrived(job.turn_id)
        except BaseException:  # no sandbox here: leave the session free for any node
            parts.ledger.release_lease(sid, node)
            raise
        turn.mark("acquire_ms", t)
        return local

    def _materialise(self, info: SessionInfo) -> LocalSession:
        """Take a warm sandbox for the session and restore its latest snapshot (or its
        memory image, when a pause saved one and it restores: ``worker.turns.memory``)."""
        if info.memory_image is not None:
            parts = self.parts
            backend = parts.backend_for(info.type)
            resumed = memory.arrive(parts.ledger, parts.persistence.store, backend, info)
            if resumed is not None:
                parts.sessions.put(resumed)
                return resumed
        sbx = self.pool.acquire(info.type, info.quotas, session_id=info.id, tenant=info.tenant)
        local = LocalSession.serving(info, sbx)
        try:
            if info.snapshot:
                policy = self.parts.persistence
                local.manifest = policy.restore(sbx, info.tenant, info.id, info.snapshot)
                local.snapshot = info.snapshot
        except BaseException:
            self.pool.discard(sbx)
            raise
        self.parts.sessions.put(local)
        return local

    # ---- the operation ----------------------------------------------------------------

    def _apply(self, local: LocalSession, job: TurnJob, handler: SandboxHandler[Any]) -> TurnResult:
        """Run the turn's op in the sandbox: its handler's result."""
        backend = self.parts.backend_for(local.sandbox_type)
        ctx = SandboxContext(self.node, job, self.parts, backend, local.sandbox)
        try:
            out = handler.run(ctx, job.op)
        except SandboxLost:
            self.parts.residency.discard(local)
            raise
        if local.sandbox.state in ("lost", "destroyed"):
            # Destroyed to hold a deadline: nothing of this turn is kept, the next
            # turn starts from the last snapshot in a fresh container.
            self.parts.residency.discard(local)
            local.dirty = False
        return out

    def _record(self, job: TurnJob, local: LocalSession) -> None:
        """Count the turn; ``unsaved`` when the workspace has changes no snapshot holds."""
        local.last_used = time.monotonic()
        self.parts.ledger.record_turn(
            job.session.id, snapshot=local.snapshot, turn_id=job.turn_id, unsaved=local.dirty
        )
