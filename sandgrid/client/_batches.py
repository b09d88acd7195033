"""The requests of the API's batch routes: one builder a call (see ``_requests``). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from sandgrid.batch.models import BatchCreate, BatchInfo, BatchIsolation, BatchJob, BatchResult
from sandgrid.client._call import Call, model, parse_answer, parse_as
from sandgrid.models import NEXT_OFFSET_HEADER, Quotas

__all__ = [
    "BatchPage",
    "batch_results",
    "cancel_batch",
    "create_batch",
    "get_batch",
    "resume_batch",
]

#: Result lines of a batch and the offset to read on from.
BatchPage = tuple[list[BatchResult], int]


def create_batch(
    jobs: Sequence[BatchJob | Mapping[str, Any]],
    *,
    type: str = "python",
    concurrency: int = 8,
    isolation: BatchIsolation = "job",
    max_attempts: int = 4,
    quotas: Quotas | Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Call[BatchInfo]:
    """Submit a batch (it starts at once); read its progress with ``get_batch``."""
    spec = model(
        BatchCreate,
        type=type,
        jobs=[j if isinstance(j, BatchJob) else model(BatchJob, **j) for j in jobs],
        concurrency=concurrency,
        isolation=isolation,
        max_attempts=max_attempts,
        quotas=quotas,
        labels=dict(labels or {}),
    )
    body = spec.model_dump(mode="json", exclude_defaults=True)
    body["jobs"] = [j.model_dump(mode="json", exclude_defaults=True) for j in spec.jobs]
    return Call("POST", "/v1/batches", parse_as(BatchInfo), json=body)


def get_batch(batch_id: str) -> Call[BatchInfo]:
    """The batch's state and counts."""
    return Call("GET", f"/v1/batches/{batch_id}", parse_as(BatchInfo))


def batch_results(batch_id: str, offset: int = 0, limit: int = 10_000) -> Call[BatchPage]:
    """Result lines from ``offset`` in completion order, and the offset to read on from."""

    def parse(r: httpx.Response) -> BatchPage:
        lines = [parse_answer(BatchResult, x) for x in r.text.splitlines() if x]
        return lines, int(r.headers.get(NEXT_OFFSET_HEADER, offset + len(lines)))

    params = {"offset": offset, "limit": limit}
    return Call("GET", f"/v1/batches/{batch_id}/results", parse, params=params)


def cancel_batch(batch_id: str) -> Call[BatchInfo]:
    """Cancel the batch's jobs not yet run."""
    return Call("DELETE", f"/v1/batches/{batch_id}", parse_as(BatchInfo))


def resume_batch(batch_id: str) -> Call[BatchInfo]:
    """Run on a batch whose runner stopped."""
    return Call("POST", f"/v1/batches/{batch_id}/resume", parse_as(BatchInfo))
