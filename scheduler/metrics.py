"""The control plane's Prometheus metrics, defined in one place.

Served at ``GET /metrics`` on the API (``scheduler.api.ops``). The API runs
one process with threads (uvicorn, no workers fork), so the default registry
of ``prometheus_client`` is the process's: no multiprocess mode needed. Each
metric is updated at an existing seam: the turn runner (turns and stage
timings), admission (rejections), the error mapping (registry and store
errors), the batch store (batch progress). docs/operations.md says what each
one means.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from sandgrid.errors import ErrorCode, SandgridError
from sandgrid.wire.catalog import metric_type

__all__ = [
    "ADMISSION_REJECTIONS",
    "BATCH_JOBS",
    "STAGE_BUCKETS",
    "STAGE_SECONDS",
    "STORE_ERRORS",
    "TURNS",
    "observe_turn",
    "reject",
    "store_error",
]

#: Latency buckets (s) of every stage: from a fast exec's 1 ms to a long command.
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)

TURNS = Counter(
    "sandgrid_turns",
    "Turns the API ran, by sandbox type, op and outcome (ok or the error code).",
    ["type", "op", "outcome"],
)
STAGE_SECONDS = Histogram(
    "sandgrid_turn_stage_seconds",
    "Time of a turn's stage: api (scheduler), queue (broker and result transport); "
    "the workers export worker, sandbox and snapshot as sandgrid_worker_stage_seconds.",
    ["stage", "op"],
    buckets=STAGE_BUCKETS,
)
ADMISSION_REJECTIONS = Counter(
    "sandgrid_admission_rejections",
    "Requests admission refused, by reason (backpressure, tenant_limit, max_sessions, "
    "no_capacity, quota).",
    ["reason"],
)
STORE_ERRORS = Counter(
    "sandgrid_store_errors",
    "Errors of the registry (Redis) and the object store (MinIO) answered or absorbed.",
    ["store", "operation"],
)
BATCH_JOBS = Counter(
    "sandgrid_batch_jobs",
    "Batch jobs finished, by status (ok, failed, error).",
    ["status"],
)

_STORES = {ErrorCode.REGISTRY_UNAVAILABLE: "registry", ErrorCode.STORE_UNAVAILABLE: "objects"}


def observe_turn(sandbox_type: str, op: str, outcome: str, timings: dict[str, float]) -> None:
    """Count a turn and observe its scheduler-side stages (``timings`` in ms).

    A tenant's private type is counted as ``private`` (``catalog.metric_type``).
    """
    TURNS.labels(type=metric_type(sandbox_type), op=op, outcome=outcome).inc()
    for stage in ("api", "queue"):
        ms = timings.get(f"{stage}_ms")
        if ms is not None:
            STAGE_SECONDS.labels(stage=stage, op=op).observe(ms / 1000)


def reject(reason: str) -> None:
    """Count one refusal of admission."""
    ADMISSION_REJECTIONS.labels(reason=reason).inc()


def store_error(err: SandgridError) -> None:
    """Count an error answered to a caller when it says a store was unavailable."""
    store = _STORES.get(err.code)
    if store is not None:
        STORE_ERRORS.labels(store=store, operation=err.operation or "").inc()
