"""Routes of batches: submit, list, progress, results (JSONL), cancel, resume.

Thin: the work is in ``scheduler.batch.manager.BatchManager``. Results come as JSON
Lines from an offset in completion order, with ``X-Sandgrid-Next-Offset``, so a
client that lost its connection (or was killed) reads on where it stopped.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from sandgrid.batch.models import BatchCreate, BatchInfo
from sandgrid.errors import SandgridError
from sandgrid.models import NEXT_OFFSET_HEADER
from scheduler.api.deps import NO_BODY, CurrentTenant, Svc
from scheduler.batch.manager import BatchManager

__all__ = [
    "JSONL",
    "MAX_RESULTS_PER_CALL",
    "MAX_RESULT_OFFSET",
    "batch_results",
    "cancel_batch",
    "create_batch",
    "get_batch",
    "list_batches",
    "resume_batch",
    "router",
]

router = APIRouter(prefix="/v1/batches", tags=["batches"])

JSONL = "application/x-ndjson"
MAX_RESULTS_PER_CALL = 10_000
#: The largest ``offset`` of a results page: Redis list indexes are 64-bit, and no
#: batch comes near it (a larger one was a 500 from LRANGE).
MAX_RESULT_OFFSET = 1 << 40


def _manager(svc: Any) -> BatchManager:
    if svc.batches is None:
        raise SandgridError("batches are not enabled in this API process")
    manager: BatchManager = svc.batches
    return manager


@router.post("", status_code=status.HTTP_201_CREATED, response_model=BatchInfo)
def create_batch(body: BatchCreate, svc: Svc, tenant: CurrentTenant) -> BatchInfo:
    """Submit a batch; it starts at once. Each job ends with exactly one result."""
    return _manager(svc).submit(tenant, body)


@router.get("", response_model=dict[str, list[BatchInfo]])
def list_batches(svc: Svc, tenant: CurrentTenant) -> dict[str, list[BatchInfo]]:
    """The caller's batches that have not expired."""
    return {"batches": _manager(svc).list(tenant)}


@router.get("/{batch_id}", response_model=BatchInfo)
def get_batch(batch_id: str, svc: Svc, tenant: CurrentTenant) -> BatchInfo:
    """Progress: counts by status, jobs in flight, rate, ETA, state."""
    return _manager(svc).get(tenant, batch_id)


@router.get(
    "/{batch_id}/results", response_class=Response, responses={200: {"content": {JSONL: {}}}}
)
def batch_results(
    batch_id: str,
    svc: Svc,
    tenant: CurrentTenant,
    offset: Annotated[
        int, Query(ge=0, le=MAX_RESULT_OFFSET, description="first result line to return")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_RESULTS_PER_CALL)] = MAX_RESULTS_PER_CALL,
) -> Response:
    """Result lines (``BatchResult`` JSON) from ``offset``, in completion order."""
    lines = _manager(svc).results(tenant, batch_id, offset, limit)
    body = "".join(line + "\n" for line in lines)
    headers = {NEXT_OFFSET_HEADER: str(offset + len(lines))}
    return Response(content=body, media_type=JSONL, headers=headers)


@router.delete("/{batch_id}", response_model=BatchInfo)
def cancel_batch(batch_id: str, svc: Svc, tenant: CurrentTenant) -> BatchInfo:
    """Cancel: jobs in flight finish and are recorded, no new job starts."""
    return _manager(svc).cancel(tenant, batch_id)


@router.post("/{batch_id}/resume", response_model=BatchInfo, dependencies=[NO_BODY])
def resume_batch(batch_id: str, svc: Svc, tenant: CurrentTenant) -> BatchInfo:
    """Run the jobs of a cancelled or interrupted batch that have no result yet."""
    return _manager(svc).resume(tenant, batch_id)
