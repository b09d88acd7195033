"""One turn, start to end: claim -> lease -> sandbox (+restore) -> op -> snapshot.

The executor is the only place that knows the order of a turn's steps; the
Celery task around it is a thin shell (``worker.tasks``) and every step below is
a call into its own module (registry, pool, backend, snapshot policy).

Why snapshot before reporting: with the default policy ``after_turn`` the
turn's result is only returned once its workspace is safe in the store, so the
next turn can run on any worker, and a worker that dies mid-turn leaves the
snapshot of the turn before it, from which the turn can run again exactly once
(``worker.persistence`` decides when a snapshot is taken).

Two ops need no sandbox: a fork copies a snapshot in the store, and a close
destroys the session's sandbox here (if any) and deletes its snapshots.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sandgrid.errors import (
    Conflict,
    ErrorCode,
    InfrastructureError,
    SandboxLost,
    SandgridError,
)
from sandgrid.models import SessionInfo
from sandgrid.wire.jobs import (
    LIFECYCLE_OPS,
    CloseOp,
    DeleteOp,
    ExecOp,
    ForkOp,
    ListOp,
    ProcOp,
    ProcStartOp,
    PtyOp,
    ReadOp,
    RunCodeOp,
    TarDownloadOp,
    TarUploadOp,
    TurnJob,
    TurnOp,
    TurnOutcome,
    WriteOp,
)
from sandgrid.wire.ledger import SessionLedger
from worker.background import proc_turn, start_background
from worker.code import run_code
from worker.egress.env import session_env
from worker.interactive import TurnControl
from worker.lifecycle import SessionLifecycle
from worker.persistence import Persistence, unsaved_result
from worker.ran import RanTurns
from worker.residency import Residency
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.pool import BackendFor, SandboxPool
from worker.sessions.table import LocalSession, SessionTable
from worker.terminal import TerminalBridge

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
        ledger: the session ledger (turn claims, leases, records).
        sessions: the node's session table.
        pool: where a session's sandbox comes from.
        persistence: the snapshot policy (restore, save around a turn, fork, forget).
        residency: how a session leaves the node (a lost sandbox, a close).
        backend_for: the backend of a sandbox type (it runs the op).
        incarnation: this process's id, named in its claims (see ``NodeRecord``).
        terminal: serves terminal turns (``PtyOp``); None refuses them.
        control: streams and cancels execs by turn id (``worker.interactive``);
            None runs them plain.
        ran: the turns this process ran lately (``worker.ran``).
    """

    node: str
    ledger: SessionLedger
    sessions: SessionTable
    pool: SandboxPool
    persistence: Persistence
    residency: Residency
    backend_for: BackendFor
    incarnation: str = ""
    terminal: TerminalBridge | None = None
    control: TurnControl | None = None
    ran: RanTurns = field(default_factory=RanTurns)

    # ---- the turn --------------------------------------------------------------

    def run(self, job: TurnJob) -> TurnOutcome:
        """Run one turn and report it; never raises for a turn's own failure.

        A turn this process already ran (an attempt sent again because the API
        took this node for dead) is answered with that run's outcome.
        """
        turn = _Turn(time.perf_counter(), {})
        if not self.ledger.claim_turn(job.turn_id, self.node, job.attempt, self.incarnation):
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
        """The op of the turn, by kind; a failure of the turn is its outcome."""
        name = self.node
        if (done := self.ran.get(job.turn_id)) is not None:
            raise _AlreadyRan(done)
        try:
            if isinstance(job.op, CloseOp | ForkOp):
                snapshot, result = None, self._control(job)
            elif isinstance(job.op, LIFECYCLE_OPS):
                snapshot, result = None, self._lifecycle().apply(job)
            elif isinstance(job.op, ProcOp):
                snapshot, result = None, proc_turn(self.sessions, self.backend_for, job, name)
            else:
                local, result = self._turn(job, turn)
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
            node=name,
            ok=True,
            result=result,
            snapshot=snapshot,
            timings=turn.marks,
        )

    def _turn(self, job: TurnJob, turn: _Turn) -> tuple[LocalSession, dict[str, Any]]:
        """Run the op in the session's sandbox, snapshot as the policy says, record it.

        An op that ran but whose snapshot failed is a result all the same,
        marked ``saved: false`` (``unsaved_result``); the turn is counted and the
        session recorded ``unsaved``.

        Raises:
            SandgridError: the op failed.
        """
        local = self._session_for(job, turn)
        with local.lock:
            if (done := self.ran.get(job.turn_id)) is not None:  # ran while we waited
                raise _AlreadyRan(done)
            t = time.perf_counter()
            self.persistence.before_turn(local, job.op.kind)
            result = self._apply(local, job)
            turn.applied = True
            t = turn.mark("sandbox_ms", t)
            try:
                self.persistence.after_turn(local, job.op.kind)
            except SandgridError as exc:
                log.warning("turn %s ran but was not saved: %s", job.turn_id, exc)
                result = unsaved_result(exc, result)
            finally:
                turn.mark("snapshot_ms", t)
        self._record(job, local)
        return local, result

    def _control(self, job: TurnJob) -> dict[str, Any]:
        """A fork (copy a snapshot) or a close (destroy the sandbox, delete snapshots)."""
        info = job.session
        if isinstance(job.op, ForkOp):
            return self.persistence.fork(job)
        local = self.sessions.get(info.id)
        if local is not None:
            with local.lock:
                self.residency.discard(local)
        deleted = self.persistence.forget(info.tenant, info.id)
        return {"closed": True, "snapshots_deleted": deleted}

    def _lifecycle(self) -> SessionLifecycle:
        """Checkpoints, restore and pause (``worker.lifecycle``)."""
        return SessionLifecycle(self.ledger, self.sessions, self.residency, self.persistence)

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
        sid, node = job.session.id, self.node
        t = time.perf_counter()
        local = self.sessions.get(sid)
        if local is not None and local.sandbox.state not in ("lost", "error", "destroyed"):
            # Ours already: the heartbeat renews the lease and drops the session
            # here if the lease was ever lost, so no round trip on the hot path.
            return local
        if local is not None:  # its sandbox was lost: start again from the snapshot
            self.residency.discard(local)
        if not self.ledger.acquire_lease(sid, node):
            owner = self.ledger.lease_owner(sid)
            raise Conflict(
                f"session {sid} is held by node {owner}",
                code=ErrorCode.SESSION_BUSY,
                operation="turn",
                context={"owner": owner},
                retryable=True,
            )
        t = turn.mark("lease_ms", t)
        try:
            info = self.ledger.get_any(sid) or job.session
            if info.state == "closed":
                raise Conflict(
                    f"session {sid} is closed", code=ErrorCode.SESSION_CLOSED, operation="turn"
                )
            local = self._materialise(info)
        except BaseException:  # no sandbox here: leave the session free for any node
            self.ledger.release_lease(sid, node)
            raise
        turn.mark("acquire_ms", t)
        return local

    def _materialise(self, info: SessionInfo) -> LocalSession:
        """Take a warm sandbox for the session and restore its latest snapshot."""
        sbx = self.pool.acquire(info.type, info.quotas, session_id=info.id, tenant=info.tenant)
        local = LocalSession(
            session_id=info.id,
            tenant=info.tenant,
            sandbox_type=info.type,
            sandbox=sbx,
            policy=info.snapshot_policy,
        )
        try:
            if info.snapshot:
                local.manifest = self.persistence.restore(sbx, info.tenant, info.id, info.snapshot)
                local.snapshot = info.snapshot
        except BaseException:
            self.pool.discard(sbx)
            raise
        self.sessions.put(local)
        return local

    # ---- the operation ----------------------------------------------------------------

    def _apply(self, local: LocalSession, job: TurnJob) -> dict[str, Any]:
        """Run the turn's op in the sandbox; the JSON result of the op."""
        backend = self.backend_for(local.sandbox_type)
        try:
            out = self._dispatch(backend, local.sandbox, job.op, job.session, job.turn_id)
        except SandboxLost:
            self.residency.discard(local)
            raise
        if local.sandbox.state in ("lost", "destroyed"):
            # Destroyed to hold a deadline: nothing of this turn is kept, the next
            # turn starts from the last snapshot in a fresh container.
            self.residency.discard(local)
            local.dirty = False
        return out

    def _dispatch(
        self,
        backend: SandboxManager,
        sbx: Sandbox,
        op: TurnOp,
        info: SessionInfo,
        turn_id: str = "",
    ) -> dict[str, Any]:
        if isinstance(op, ExecOp):
            request = op.request
            if info.env or info.network is not None:
                env = {**session_env(info), **info.env, **request.env}
                request = request.model_copy(update={"env": env})
            if self.control is not None and turn_id:
                result = self.control.exec(backend, sbx, request, turn_id, info.id)
            else:
                result = backend.exec(sbx, request)
            return dict(result.model_copy(update={"node": self.node}).model_dump(mode="json"))
        if isinstance(op, ProcStartOp):
            return start_background(backend, sbx, op, info, self.node)
        if isinstance(op, WriteOp):
            return {"written": backend.write_files(sbx, op.files)}
        if isinstance(op, ReadOp):
            return dict(backend.read_file(sbx, op.path, op.encoding).model_dump(mode="json"))
        if isinstance(op, ListOp):
            return dict(backend.list_files(sbx, op.path, op.recursive).model_dump(mode="json"))
        if isinstance(op, DeleteOp):
            return {"deleted": backend.delete(sbx, op.path, op.recursive)}
        if isinstance(op, TarUploadOp):
            return {"files": backend.put_tar(sbx, op.path, base64.b64decode(op.data_b64))}
        if isinstance(op, TarDownloadOp):
            return {"data_b64": base64.b64encode(backend.get_tar(sbx, op.path)).decode()}
        if isinstance(op, RunCodeOp):
            return dict(run_code(backend, sbx, op.request, info.env).model_dump(mode="json"))
        if isinstance(op, PtyOp) and self.terminal is not None:
            return self.terminal.run(backend, sbx, op)
        raise SandgridError(f"unknown op {op!r}")

    def _record(self, job: TurnJob, local: LocalSession) -> None:
        """Count the turn; ``unsaved`` when the workspace has changes no snapshot holds."""
        local.last_used = time.monotonic()
        self.ledger.record_turn(
            job.session.id, snapshot=local.snapshot, turn_id=job.turn_id, unsaved=local.dirty
        )
