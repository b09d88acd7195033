"""One batch driven in one API process: runner threads, retries, slots, lanes.

``BatchRun`` starts up to ``concurrency`` runner threads (never more than the
grid's batch capacity); each owns a lane (``scheduler.batch.lanes``) and pulls
jobs from a queue. Every job ends with exactly one ``BatchResult``:

* ``ok``: exit code 0; ``failed``: the job's own code failed (non-zero exit,
  deadline, OOM) and is *not* retried: running it again would fail the same way;
* ``error``: the grid could not run it. Infrastructure failures
  (``INFRA_CODES``, or an error marked retryable) are retried with exponential
  backoff and jitter up to ``max_attempts`` runs; ``attempts`` records how many.
  A refusal that says "later" (429: tenant ceiling, backpressure) waits its
  ``Retry-After`` and does not count as an attempt.

Each attempt runs under a grid-wide batch slot (``scheduler.batch.capacity``), so
batch turns never take every worker thread. A runner lease in Redis says which
process drives the batch; losing it, or a ``cancelling`` state written by any
API process, stops the run after the jobs in flight.
"""

from __future__ import annotations

import logging
import queue
import random
import secrets
import threading
import time
from dataclasses import dataclass

from sandgrid.batch.models import BatchInfo, BatchJob, BatchResult
from sandgrid.errors import ErrorCode, LimitExceeded, SandgridError
from sandgrid.models import ExecResult, Quotas
from scheduler.batch.capacity import BatchSlots, CapacitySource, InteractiveActivity
from scheduler.batch.lanes import FreshLane, Lane, LaneContext, ReusedLane
from scheduler.batch.store import BatchStore

__all__ = [
    "INFRA_CODES",
    "RUNNER_RENEW_S",
    "RUNNER_TTL_S",
    "SLOT_MARGIN_S",
    "SLOT_POLL_S",
    "BatchRun",
    "RetryPolicy",
    "RunSetup",
    "error_result",
    "exec_outcome",
    "slot_ttl",
]

log = logging.getLogger(__name__)

#: Error codes of the grid, not of the job: the job may run again elsewhere.
INFRA_CODES = frozenset(
    {
        ErrorCode.WORKER_LOST,
        ErrorCode.SANDBOX_LOST,
        ErrorCode.NO_CAPACITY,
        ErrorCode.STORE_UNAVAILABLE,
    }
)
#: How often a runner thread looks again for a free batch slot (s).
SLOT_POLL_S = 0.05
#: Extra slot lifetime beyond a job's deadline (s): files, queue, reset.
SLOT_MARGIN_S = 120.0
#: How often the runner lease is renewed, and its lifetime (s).
RUNNER_RENEW_S = 2.0
RUNNER_TTL_S = 10.0


@dataclass(frozen=True)
class RetryPolicy:
    """Which failures run again, and after how long.

    Attributes:
        max_attempts: runs of one job at most (1: never again).
        base_s: the first backoff; doubled per attempt, up to ``cap_s``.
        cap_s: the longest backoff.
    """

    max_attempts: int = 4
    base_s: float = 0.5
    cap_s: float = 10.0

    def should_retry(self, err: SandgridError, attempt: int) -> bool:
        """An infrastructure failure of attempt ``attempt`` (1-based) that may run again."""
        infra = err.code in INFRA_CODES or err.retryable
        return infra and attempt < self.max_attempts

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt``: exponential, half jitter."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + random.random() / 2)


def exec_outcome(job: BatchJob, result: ExecResult, attempts: int) -> BatchResult:
    """The result line of a job that ran: ``ok`` for exit 0, else ``failed``."""
    ok = result.exit_code == 0 and not result.timed_out and not result.oom_killed
    return BatchResult(
        id=job.id,
        status="ok" if ok else "failed",
        exit_code=result.exit_code,
        stdout=result.stdout,
        stderr=result.stderr,
        stdout_truncated=result.stdout_truncated,
        stderr_truncated=result.stderr_truncated,
        duration_ms=result.duration_ms,
        timed_out=result.timed_out,
        node=result.node,
        attempts=attempts,
    )


def error_result(job: BatchJob, err: SandgridError, attempts: int) -> BatchResult:
    """The result line of a job the grid could not run."""
    return BatchResult(id=job.id, status="error", attempts=attempts, error=err.to_body()["error"])


@dataclass
class RunSetup:
    """What every run of this process shares, plus the batch's own settings."""

    store: BatchStore
    slots: BatchSlots
    capacity: CapacitySource
    lane_ctx: LaneContext
    isolation: str
    policy: RetryPolicy
    slot_ttl_s: float
    activity: InteractiveActivity | None = None


class BatchRun:
    """Drives one batch in this process until its jobs are done or it is stopped.

    Args:
        info: the batch.
        jobs: its pending jobs, in order.
        setup: the store, slots, capacity, lane context and retry policy.
    """

    def __init__(self, info: BatchInfo, jobs: list[BatchJob], setup: RunSetup) -> None:
        self.info = info
        self.setup = setup
        self.owner = f"run-{secrets.token_hex(6)}"
        self.jobs: queue.SimpleQueue[BatchJob] = queue.SimpleQueue()
        for job in jobs:
            self.jobs.put(job)
        self.pending = len(jobs)
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self._threads: list[threading.Thread] = []
        self._node_lanes: dict[str, int] = {}
        #: The node each runner thread's lane is counted on in ``_node_lanes``.
        self._counted: dict[int, str] = {}
        self._lock = threading.Lock()

    # ---- life cycle -----------------------------------------------------------

    def start(self) -> bool:
        """Take the runner lease and start the threads; False if another runs it."""
        store = self.setup.store
        if not store.take_runner(self.info.id, self.owner, RUNNER_TTL_S):
            return False
        store.start(self.info.id)
        total_limit = sum(self.setup.capacity.limits(self.info.type).values()) or 1
        n = max(1, min(self.info.concurrency, total_limit, self.pending))
        for i in range(n):
            t = threading.Thread(target=self._thread, args=(i,), daemon=True)
            t.name = f"batch-{self.info.id}-{i}"
            self._threads.append(t)
            t.start()
        threading.Thread(target=self._supervise, daemon=True).start()
        return True

    def stop(self) -> None:
        """Finish the jobs in flight, start no more."""
        self.stopping.set()

    def _supervise(self) -> None:
        """Renew the runner lease and watch for a cancel; settle the state at the end."""
        store, bid = self.setup.store, self.info.id
        while any(t.is_alive() for t in self._threads):
            self.stopping.wait(RUNNER_RENEW_S)
            try:
                if not store.renew_runner(bid, self.owner, RUNNER_TTL_S):
                    self.stop()  # the lease lapsed and another process took the batch
                elif (store.info(bid) or self.info).state == "cancelling":
                    self.stop()
            except Exception as exc:  # Redis gone (shutdown): the threads end on their own
                log.warning("batch %s: runner lease renewal failed: %s", bid, exc)
                self.stop()
        for t in self._threads:
            t.join()
        self._settle()
        self.finished.set()

    def _settle(self) -> None:
        """``done`` is written with the last result; a cancelled batch says so; a run
        stopped otherwise (shutdown) is left ``running`` without a runner: it shows
        as ``interrupted`` and may be resumed."""
        store, bid = self.setup.store, self.info.id
        try:
            info = store.info(bid)
            if info is not None and info.state == "cancelling":
                store.update(bid, state="cancelled")
            store.update(bid, in_flight=0)
            store.expire_later(bid)
            store.release_runner(bid, self.owner)
        except Exception as exc:
            log.warning("batch %s: final state not written: %s", bid, exc)

    # ---- the runner threads -------------------------------------------------------

    def _thread(self, index: int) -> None:
        lane = self._new_lane(index)
        try:
            while not self.stopping.is_set():
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    return
                started = time.monotonic()
                result = self._run_job(lane, job)
                if result is None:  # stopped before it ran: leave it pending
                    return
                self.setup.store.record(self.info.id, result)
                lane = self._rebalance(lane, index)
                self._yield(time.monotonic() - started)
        except Exception:
            log.exception("batch %s: runner thread %d failed", self.info.id, index)
        finally:
            lane.close()

    def _yield(self, took_s: float) -> None:
        """While interactive turns flow, rest as long as the job took (half duty)."""
        activity = self.setup.activity
        if activity is not None:
            self.stopping.wait(activity.gap(took_s))

    def _new_lane(self, index: int) -> Lane:
        labels = {"batch": self.info.id, "lane": str(index)}
        ctx = LaneContext(**{**self.setup.lane_ctx.__dict__, "labels": labels})
        return ReusedLane(ctx) if self.setup.isolation == "lane" else FreshLane(ctx)

    def _rebalance(self, lane: Lane, index: int) -> Lane:
        """Keep a node's lanes within its batch limit: a surplus lane is reopened,
        and its next job lands wherever the batch queue sends it."""
        if not isinstance(lane, ReusedLane):
            return lane
        with self._lock:
            counted = self._counted.get(index)
            if counted is not None and lane.session_id is None:
                # Closed after a failed job or reset: its place on the node is free
                # again (kept, it would push every next session of this lane off).
                self._node_lanes[counted] -= 1
                del self._counted[index]
        if lane.session_id is None or lane.node is None or lane.jobs_run != 1:
            return lane
        limit = self.setup.capacity.limits(self.info.type).get(lane.node, 1)
        with self._lock:
            count = self._node_lanes.get(lane.node, 0) + 1
            self._node_lanes[lane.node] = count
            if count <= limit:
                self._counted[index] = lane.node
                return lane
            self._node_lanes[lane.node] -= 1
        lane.close()
        return self._new_lane(index)

    def _run_job(self, lane: Lane, job: BatchJob) -> BatchResult | None:
        """Every attempt of one job; None when the batch stopped before it ran."""
        policy, attempt = self.setup.policy, 1
        while True:
            if not self._take_slot(job):
                self.jobs.put(job)
                return None
            try:
                return exec_outcome(job, lane.run(job), attempt)
            except LimitExceeded as exc:  # not run: wait as told, no attempt counted
                self.stopping.wait(max(0.05, exc.retry_after))
                continue
            except SandgridError as exc:
                if not policy.should_retry(exc, attempt):
                    return error_result(job, exc, attempt)
                log.info("batch %s: job %s attempt %d: %s", self.info.id, job.id, attempt, exc)
                self.setup.store.incr(self.info.id, "retries")
                self.stopping.wait(policy.backoff(attempt))
                attempt += 1
            finally:
                self._release_slot(job)

    def _take_slot(self, job: BatchJob) -> bool:
        """Wait for a grid-wide batch slot; False when the batch is stopped first."""
        setup = self.setup
        while not self.stopping.is_set():
            limit = sum(setup.capacity.limits(self.info.type).values()) or 1
            if setup.activity is not None:
                limit = setup.activity.limit(limit)  # interactive turns first
            slot = f"{self.info.id}:{job.id}"
            if setup.slots.acquire(self.info.type, slot, limit, setup.slot_ttl_s):
                setup.store.incr(self.info.id, "in_flight")
                return True
            self.stopping.wait(SLOT_POLL_S)
        return False

    def _release_slot(self, job: BatchJob) -> None:
        self.setup.slots.release(self.info.type, f"{self.info.id}:{job.id}")
        self.setup.store.incr(self.info.id, "in_flight", -1)


def slot_ttl(quotas: Quotas | None, jobs: list[BatchJob]) -> float:
    """A slot outlives the longest job's deadline plus a margin."""
    default = (quotas or Quotas()).timeout_s
    longest = max(
        (j.timeout_s or (j.quotas or quotas or Quotas()).timeout_s for j in jobs), default=default
    )
    return longest + SLOT_MARGIN_S
