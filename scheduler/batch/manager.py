"""Batch runs: submit, progress, cancel, resume, collect.

A batch is a list of jobs (``BatchJob``: argv, shell or python, files, stdin,
deadline, quotas) to run on sandboxes of one type, each job ending with exactly
one ``BatchResult`` line. It lives in Redis (``scheduler.batch.store``), so it
outlives the request that created it and the API process that runs it; a
``BatchRun`` (``scheduler.batch.run``) drives it in one API process.

    POST   /v1/batches                 submit (``BatchCreate``) -> ``BatchInfo``
    GET    /v1/batches/{id}            progress: counts, rate, ETA, state
    GET    /v1/batches/{id}/results    result lines (JSONL) from an offset
    DELETE /v1/batches/{id}            cancel: jobs in flight finish, no new ones
    POST   /v1/batches/{id}/resume     run the jobs without a result again

States: ``running`` -> ``done``; ``running`` -> ``cancelling`` -> ``cancelled``;
a ``running`` batch whose runner process went away shows as ``interrupted``.
``cancelled`` and ``interrupted`` batches resume where they stopped: a job that
has a result never runs again.

Who calls what: the API routes (``scheduler.api.batches``) call
``BatchManager``; the CLI (``sandgrid batch run``) and the SDK speak HTTP.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time

from pydantic import ValidationError

from sandgrid.batch.models import BatchCreate, BatchInfo
from sandgrid.errors import Conflict, ErrorCode, InvalidInput
from sandgrid.models import Quotas, SessionCreate
from scheduler.batch.capacity import BatchSlots, CapacitySource, InteractiveActivity
from scheduler.batch.lanes import LaneContext
from scheduler.batch.run import BatchRun, RetryPolicy, RunSetup, slot_ttl
from scheduler.batch.store import BatchStore
from scheduler.registry.sessions import SessionRegistry
from scheduler.tenants import Tenant
from scheduler.turns.admission import Admission, check_exec, check_quotas
from scheduler.turns.runner import TurnRunner

__all__ = ["RESUME_WAIT_S", "BatchManager"]

log = logging.getLogger(__name__)

#: How long ``resume`` waits for this process's own run to finish cancelling (s).
RESUME_WAIT_S = 30.0


class BatchManager:
    """The batches of this API process: starts, stops and reports them.

    Args:
        store: batch records in Redis.
        registry: the session registry (batch jobs are sessions).
        turns: the turn flow the jobs run through.
        admission: the tenant ceilings checked at submission.
        slots: the grid-wide semaphore of batch turns.
        capacity: each node's batch limit.
        policy: retry backoff (``max_attempts`` comes from each batch).
        activity: interactive traffic of this process; batches yield to it.
    """

    def __init__(
        self,
        store: BatchStore,
        registry: SessionRegistry,
        turns: TurnRunner,
        admission: Admission,
        slots: BatchSlots,
        capacity: CapacitySource,
        *,
        policy: RetryPolicy | None = None,
        activity: InteractiveActivity | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.turns = turns
        self.admission = admission
        self.slots = slots
        self.capacity = capacity
        self.policy = policy or RetryPolicy()
        self.activity = activity
        self.runs: dict[str, BatchRun] = {}
        self._lock = threading.Lock()

    def submit(self, tenant: Tenant, spec: BatchCreate) -> BatchInfo:
        """Check and store a batch, and start running it here.

        Raises:
            InvalidInput: a job is malformed (``jobs[n].field``) or asks for more
                than the tenant's ceilings; nothing is stored then.
        """
        self._check(tenant, spec)
        info = self.store.create(tenant.name, spec)
        self._start(tenant, info)
        return self.store.get(tenant.name, info.id)

    def get(self, tenant: Tenant, batch_id: str) -> BatchInfo:
        """Progress of a batch (``NotFound`` for an unknown or another tenant's id)."""
        return self.store.get(tenant.name, batch_id)

    def list(self, tenant: Tenant) -> builtins.list[BatchInfo]:
        return self.store.list(tenant.name)

    def results(self, tenant: Tenant, batch_id: str, offset: int, limit: int) -> builtins.list[str]:
        """Result lines from ``offset`` in completion order (``BatchResult`` JSON)."""
        self.store.get(tenant.name, batch_id)
        return self.store.results(batch_id, offset, limit)

    def cancel(self, tenant: Tenant, batch_id: str) -> BatchInfo:
        """Stop starting jobs; those in flight finish and are recorded."""
        info = self.store.get(tenant.name, batch_id)
        if info.state == "running":
            self.store.update(batch_id, state="cancelling")
        elif info.state == "interrupted":
            self.store.update(batch_id, state="cancelled")
        run = self.runs.get(batch_id)
        if run is not None:
            run.stop()
        return self.store.get(tenant.name, batch_id)

    def resume(self, tenant: Tenant, batch_id: str) -> BatchInfo:
        """Run again the jobs of a cancelled or interrupted batch that have no result.

        Raises:
            Conflict: the batch is still cancelling in another API process.
        """
        info = self.store.get(tenant.name, batch_id)
        if info.state == "cancelling":
            info = self._wait_local(tenant, batch_id)
        elif (run := self.runs.get(batch_id)) is not None:
            run.finished.wait(RESUME_WAIT_S)  # it wrote ``cancelled`` and is ending
        if info.state in ("cancelled", "interrupted"):
            self._start(tenant, info)
        return self.store.get(tenant.name, batch_id)

    def shutdown(self, wait_s: float = 5.0) -> None:
        """Stop every run of this process (jobs in flight finish if they can in time);
        the batches show as ``interrupted`` and resume anywhere."""
        runs = list(self.runs.values())
        for run in runs:
            run.stop()
        deadline = time.monotonic() + wait_s
        for run in runs:
            run.finished.wait(max(0.0, deadline - time.monotonic()))

    # ---- inside -----------------------------------------------------------------

    def _wait_local(self, tenant: Tenant, batch_id: str) -> BatchInfo:
        run = self.runs.get(batch_id)
        if run is None or not run.finished.wait(RESUME_WAIT_S):
            raise Conflict(
                f"batch {batch_id!r} is still cancelling: its jobs in flight have not "
                "finished; resume it again in a moment",
                code=ErrorCode.SESSION_BUSY,
                operation="batches.resume",
                context={"batch": batch_id},
            )
        return self.store.get(tenant.name, batch_id)

    def _check(self, tenant: Tenant, spec: BatchCreate) -> None:
        quotas = spec.quotas or Quotas()
        self.admission.check_session(tenant, SessionCreate(type=spec.type, quotas=quotas))
        for n, job in enumerate(spec.jobs):
            try:
                request = job.exec_request()
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                fld = f"jobs[{n}]" + (f".{where}" if where else "")
                raise InvalidInput(
                    f"{fld}: {first['msg']} (job {job.id!r})",
                    operation="batches.create",
                    context={"field": fld, "rule": first["msg"], "job": job.id},
                ) from None
            check_exec(tenant, request)
            if job.quotas is not None:
                check_quotas(tenant, job.quotas, field=f"jobs[{n}].quotas")

    def _start(self, tenant: Tenant, info: BatchInfo) -> None:
        with self._lock:
            self.runs = {k: r for k, r in self.runs.items() if not r.finished.is_set()}
            current = self.runs.get(info.id)
            if current is not None and not current.finished.is_set():
                return
            jobs = self.store.pending(info.id)
            if not jobs:
                return
            stored = self.store.settings_of(info.id)
            quotas = Quotas.model_validate(stored["quotas"]) if stored["quotas"] else None
            setup = RunSetup(
                store=self.store,
                slots=self.slots,
                capacity=self.capacity,
                lane_ctx=LaneContext(tenant, self.registry, self.turns, info.type, quotas),
                isolation=info.isolation,
                policy=RetryPolicy(
                    max_attempts=int(stored["max_attempts"]),
                    base_s=self.policy.base_s,
                    cap_s=self.policy.cap_s,
                ),
                slot_ttl_s=slot_ttl(quotas, jobs),
                activity=self.activity,
            )
            run = BatchRun(info, jobs, setup)
            if run.start():
                self.runs[info.id] = run
            else:
                log.info("batch %s: another process runs it", info.id)
