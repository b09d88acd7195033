"""Batch wire models: the job and result lines, the batch spec and its progress.

A batch is run by ``scheduler.batch.manager`` (over HTTP) or ``sandgrid batch run``
(``sandgrid.cli.batch``); these are the shapes that cross the API, the SDK,
Redis (``scheduler.batch.store``) and the JSONL files. They build on the
session and exec models of ``sandgrid.models``: frozen, with the wire version
``v``, and validated the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from sandgrid.models import (
    EnvVars,
    ExecRequest,
    FileWrite,
    LabelMap,
    Quotas,
    SandboxTypeName,
    WireModel,
)

__all__ = [
    "BatchCreate",
    "BatchInfo",
    "BatchIsolation",
    "BatchJob",
    "BatchResult",
    "BatchState",
]


class BatchJob(WireModel):
    """One line of a batch's jobs JSONL."""

    id: str = Field(min_length=1, max_length=256)
    argv: list[str] | None = None
    shell: str | None = None
    python: str | None = None
    files: list[FileWrite] = Field(default_factory=list)
    stdin: str | None = None
    timeout_s: float | None = Field(None, gt=0, le=3600)
    quotas: Quotas | None = None
    env: EnvVars = Field(default_factory=dict)

    def exec_request(self) -> ExecRequest:
        """The job's command as an ``ExecRequest`` (validated: exactly one of argv,
        shell, python; env names; sizes)."""
        return ExecRequest(
            argv=self.argv,
            shell=self.shell,
            python=self.python,
            stdin=self.stdin,
            timeout_s=self.timeout_s,
            env=self.env,
        )


class BatchResult(WireModel):
    """One line of a batch's results JSONL."""

    id: str
    status: Literal["ok", "failed", "error"]
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    timed_out: bool = False
    node: str = ""
    attempts: int = 1
    error: dict[str, Any] | None = None


BatchIsolation = Literal["job", "lane"]
BatchState = Literal["running", "cancelling", "cancelled", "interrupted", "done"]


class BatchCreate(WireModel):
    """Body of ``POST /v1/batches``: jobs to run on sandboxes of one type.

    ``isolation="job"`` runs every job in a fresh sandbox of its own (a one-turn
    session, destroyed after it). ``"lane"`` runs the jobs of each of the
    batch's ``concurrency`` lanes one after another in one sandbox, emptied
    between jobs (workspace, /tmp and home wiped, leftover processes killed):
    no container start per job, so trivial jobs run many times faster.
    """

    type: SandboxTypeName = "python"
    jobs: list[BatchJob] = Field(min_length=1, max_length=100_000)
    concurrency: int = Field(8, ge=1, le=1024, description="jobs in flight at once (ceiling)")
    isolation: BatchIsolation = "job"
    max_attempts: int = Field(4, ge=1, le=20, description="runs per job on infrastructure errors")
    quotas: Quotas | None = None
    labels: LabelMap = Field(
        default_factory=dict,
        max_length=32,
        description="given to every session of the batch (the rules of a session's labels)",
    )

    @field_validator("jobs")
    @classmethod
    def _unique_ids(cls, jobs: list[BatchJob]) -> list[BatchJob]:
        seen: set[str] = set()
        for n, job in enumerate(jobs):
            if job.id in seen:
                raise ValueError(f"job id {job.id!r} (jobs[{n}]) is not unique in the batch")
            seen.add(job.id)
        return jobs


class BatchInfo(WireModel):
    """A batch's progress (``GET /v1/batches/{id}``)."""

    id: str
    tenant: str
    type: str
    state: BatchState
    isolation: BatchIsolation = "job"
    concurrency: int = 1
    total: int
    ok: int = 0
    failed: int = 0
    errors: int = 0
    retries: int = 0
    in_flight: int = 0
    rate: float = Field(0.0, description="jobs finished per second since (re)start")
    eta_s: float | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @property
    def done(self) -> int:
        """Jobs with a result (ok, failed or error)."""
        return self.ok + self.failed + self.errors
