"""Where a batch job runs: a fresh sandbox per job, or a lane's reused sandbox.

Each runner thread of a batch owns one lane and runs its jobs through it, one
at a time, as ordinary turns (``TurnRunner.run`` with ``batch=True``: routed to
the type's batch queue while the session is not live on a node).

* ``FreshLane`` (``isolation="job"``): every job is a session of its own with
  ``snapshot_policy="never"``: an optional write turn for the job's files, then
  one exec turn sent with ``close_after`` so that the worker destroys the
  sandbox at once; the record is then closed. Strongest isolation; each job
  costs a container start (about 0.2 s of Docker work on a 2-core node).
* ``ReusedLane`` (``isolation="lane"``): one session serves the lane's jobs one
  after another. Right after each job, in the same exec (``then_reset``), every
  process of the sandbox user is killed and ``/workspace``, ``/tmp``, the home
  directory, ``/dev/shm`` and IPC objects are emptied, so the next job starts as
  in a fresh sandbox of that session (a job that hit its deadline gets a reset
  turn of its own). A lane whose sandbox fails is closed and the next job opens
  a new one. One container per lane, not per job: trivial jobs run many times
  faster.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from sandgrid.batch.models import BatchJob
from sandgrid.errors import SandboxError, SandgridError
from sandgrid.models import ExecRequest, ExecResult, Quotas, SessionCreate, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import WriteOp
from sandgrid.sandbox_types import effective_quotas
from sandgrid.wire import catalog
from sandgrid.wire.jobs import expect
from scheduler.registry.sessions import SessionRegistry
from scheduler.tenants import Tenant
from scheduler.turns.runner import TurnRunner

__all__ = [
    "FUSE_MAX_SOURCE",
    "RESET_ARGV",
    "RESET_SCRIPT",
    "RESET_TIMEOUT_S",
    "RUN_THEN_RESET",
    "FreshLane",
    "Lane",
    "LaneContext",
    "ReusedLane",
    "then_reset",
]

log = logging.getLogger(__name__)

#: Run as the sandbox user between two jobs of a lane: ``kill -9 -1`` signals
#: every process of that user except the shell itself; then everything the user
#: could write is emptied: the tmpfs mounts (the root filesystem is read-only),
#: POSIX shared memory and message queues, and System V IPC objects.
RESET_SCRIPT = (
    "kill -9 -1 2>/dev/null; cd / && find /workspace /tmp /home/sandbox /dev/shm /dev/mqueue"
    " -mindepth 1 -delete 2>/dev/null; ipcrm -a 2>/dev/null"
)
RESET_ARGV = ["/bin/sh", "-c", RESET_SCRIPT + "; exit 0"]
#: A lane job's command and then the reset, in one exec (one turn per job, not
#: two); the job's own exit status is the exec's.
RUN_THEN_RESET = '"$@"; rc=$?; ' + RESET_SCRIPT + "; exit $rc"
#: Larger ``python`` sources travel in several argv chunks (the agent's
#: business): those jobs get a separate reset turn.
FUSE_MAX_SOURCE = 100_000
RESET_TIMEOUT_S = 15.0


@dataclass
class LaneContext:
    """What a lane needs to open sessions and run turns for a batch."""

    tenant: Tenant
    registry: SessionRegistry
    turns: TurnRunner
    sandbox_type: str
    quotas: Quotas | None
    labels: dict[str, str] = field(default_factory=dict)


def then_reset(request: ExecRequest) -> ExecRequest | None:
    """The job's request wrapped so that the sandbox is reset right after it, in
    the same exec: ``sh -c '"$@"; rc=$?; <reset>; exit $rc' lane <the job's argv>``.

    As in any shell, a job killed by signal N then exits with 128+N. None when
    the job cannot be wrapped (a ``python`` source too large for one argument).
    """
    if request.argv is not None:
        argv = list(request.argv)
    elif request.shell is not None:
        argv = ["/bin/sh", "-c", request.shell]
    elif len((request.python or "").encode()) <= FUSE_MAX_SOURCE:
        argv = ["python3", "-c", request.python or ""]
    else:
        return None
    wrapped = ["/bin/sh", "-c", RUN_THEN_RESET, "sandgrid-lane", *argv]
    return request.model_copy(update={"argv": wrapped, "shell": None, "python": None})


class Lane(ABC):
    """One runner thread's way of running jobs; ``node`` is where the last one ran."""

    def __init__(self, ctx: LaneContext) -> None:
        self.ctx = ctx
        self.node: str | None = None

    @abstractmethod
    def run(self, job: BatchJob) -> ExecResult:
        """Run one job and return its exec result (a non-zero exit is a result).

        Raises:
            SandgridError: the grid could not run it (the caller may retry).
        """

    @abstractmethod
    def close(self) -> None:
        """Give back whatever the lane holds (idempotent)."""

    # ---- shared steps ---------------------------------------------------------

    def _open(self, quotas: Quotas | None) -> SessionInfo:
        asked = quotas or Quotas()
        kind = catalog.current().get(self.ctx.sandbox_type)  # its default quotas (25.1)
        spec = SessionCreate(
            type=self.ctx.sandbox_type,
            quotas=effective_quotas(kind, asked) if kind is not None else asked,
            snapshot_policy="never",
            labels=self.ctx.labels,
        )
        tenant = self.ctx.tenant
        return self.ctx.registry.create(tenant.name, spec, max_sessions=tenant.limits.max_sessions)

    def _write(self, session: SessionInfo, job: BatchJob) -> SessionInfo:
        """Write the job's files; the session as it is now (live on its node)."""
        if not job.files:
            return session
        self.ctx.turns.run(
            self.ctx.tenant, session, WriteOp(files=job.files), timeout_s=None, batch=True
        )
        return self.ctx.registry.get(self.ctx.tenant.name, session.id)

    def _exec(
        self, session: SessionInfo, request: ExecRequest, *, close_after: bool = False
    ) -> ExecResult:
        done = self.ctx.turns.run(
            self.ctx.tenant,
            session,
            ExecOp(request=request),
            timeout_s=request.timeout_s,
            batch=True,
            close_after=close_after,
        )
        result = expect(done.outcome, ExecResult, "batch.exec")
        self.node = done.outcome.node or result.node
        return result.model_copy(update={"node": self.node})

    def _close_session(self, session_id: str) -> None:
        """Close the record; the owner destroys the sandbox if it still has it."""
        try:
            self.ctx.turns.close(self.ctx.tenant, session_id)
        except SandgridError as exc:
            log.warning("batch: closing session %s failed: %s", session_id, exc)
            with contextlib.suppress(Exception):
                self.ctx.registry.close(session_id)


class FreshLane(Lane):
    """``isolation="job"``: a new one-turn session per job, destroyed right after."""

    def run(self, job: BatchJob) -> ExecResult:
        session = self._open(job.quotas or self.ctx.quotas)
        try:
            session = self._write(session, job)
            return self._exec(session, job.exec_request(), close_after=True)
        finally:
            self._close_session(session.id)

    def close(self) -> None:
        """Nothing is held between jobs."""


class ReusedLane(Lane):
    """``isolation="lane"``: one session runs the lane's jobs, reset between jobs."""

    def __init__(self, ctx: LaneContext) -> None:
        super().__init__(ctx)
        self.session_id: str | None = None
        self.jobs_run = 0

    def run(self, job: BatchJob) -> ExecResult:
        if job.quotas is not None and job.quotas != (self.ctx.quotas or Quotas()):
            one_off = FreshLane(self.ctx)  # other limits need another container
            result = one_off.run(job)
            self.node = one_off.node
            return result
        request = job.exec_request()
        fused = then_reset(request)
        try:
            session = self._session()
            session = self._write(session, job)
            result = self._exec(session, fused or request)
        except SandgridError:
            self.close()  # the sandbox may be broken: the next job opens a new one
            raise
        self.jobs_run += 1
        if fused is None or result.timed_out or result.oom_killed or result.signal:
            self._reset()  # the job's own reset did not run, or may not have
        return result

    def _session(self) -> SessionInfo:
        if self.session_id is None:
            self.session_id = self._open(self.ctx.quotas).id
            self.jobs_run = 0
        return self.ctx.registry.get(self.ctx.tenant.name, self.session_id)

    def _reset(self) -> None:
        """Empty the sandbox for the next job; a lane that cannot be reset is closed."""
        try:
            request = ExecRequest(argv=RESET_ARGV, timeout_s=RESET_TIMEOUT_S)
            result = self._exec(self._session(), request)
            if result.exit_code != 0 or result.timed_out:
                raise SandboxError(f"lane reset exited with {result.exit_code}")
        except SandgridError as exc:
            log.warning("batch: lane reset failed (%s); the lane gets a new sandbox", exc)
            self.close()

    def close(self) -> None:
        if self.session_id is not None:
            sid, self.session_id = self.session_id, None
            self._close_session(sid)
