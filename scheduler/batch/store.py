"""Batch records in Redis: the jobs, their results (each exactly once), progress.

A batch outlives the HTTP request that created it and even the API process that
runs it: everything needed to finish it is here, so any API process can resume
it (``BatchManager.resume``) and a client that lost its connection reads the
results again from any offset. Keys come only from ``sandgrid.wire.names``.

* the record (hash ``sg:batch:<id>``): fields of ``BatchInfo``, each JSON-encoded;
* the jobs (list), in submission order;
* the done set and the results list, written together by one Lua script that
  refuses a second result for a job id: a job is reported exactly once even if
  two runners raced on it;
* the runner key: which API process drives the batch, with a TTL it renews. A
  ``running`` batch whose runner key lapsed is shown as ``interrupted``.
"""

from __future__ import annotations

import builtins
import json
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import redis

from sandgrid.batch.models import BatchCreate, BatchInfo, BatchJob, BatchResult
from sandgrid.errors import NotFound
from sandgrid.wire import names
from scheduler import metrics
from scheduler.registry import lua_source

__all__ = ["DEFAULT_BATCH_TTL_S", "BatchStore", "new_batch_id"]

DEFAULT_BATCH_TTL_S = 7 * 86400.0
_COUNTER = {"ok": "ok", "failed": "failed", "error": "errors"}


def new_batch_id() -> str:
    """An unguessable batch id."""
    return "b-" + secrets.token_urlsafe(12)


def _now() -> datetime:
    return datetime.now(UTC)


class BatchStore:
    """Batch records over one Redis client (``decode_responses=True``).

    Args:
        client: the Redis client.
        ttl_s: how long a batch's keys live after its creation (and after it ends).
    """

    def __init__(self, client: redis.Redis[str], *, ttl_s: float = DEFAULT_BATCH_TTL_S) -> None:
        self.redis = client
        self.ttl_s = ttl_s
        self._record = client.register_script(lua_source("record_batch_result"))

    def _keys(self, batch_id: str) -> builtins.list[str]:
        return [
            names.batch_key(batch_id),
            names.batch_jobs_key(batch_id),
            names.batch_done_key(batch_id),
            names.batch_results_key(batch_id),
        ]

    def create(self, tenant: str, spec: BatchCreate) -> BatchInfo:
        """Store a new batch (state ``running``, no runner yet) and its jobs."""
        info = BatchInfo(
            id=new_batch_id(),
            tenant=tenant,
            type=spec.type,
            state="running",
            isolation=spec.isolation,
            concurrency=spec.concurrency,
            total=len(spec.jobs),
            created_at=_now(),
            labels=spec.labels,
        )
        fields: dict[str | bytes, bytes | float | int | str] = {
            k: json.dumps(v) for k, v in info.model_dump(mode="json").items()
        }
        fields["max_attempts"] = json.dumps(spec.max_attempts)
        fields["quotas"] = json.dumps(spec.quotas.model_dump(mode="json") if spec.quotas else None)
        fields["done_at_start"] = "0"
        ttl = int(self.ttl_s)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(names.batch_key(info.id), mapping=fields)
        jobs = [j.model_dump_json(exclude_defaults=True) for j in spec.jobs]
        for start in range(0, len(jobs), 1000):
            pipe.rpush(names.batch_jobs_key(info.id), *jobs[start : start + 1000])
        for key in self._keys(info.id):
            pipe.expire(key, ttl)
        pipe.zadd(names.tenant_batches_key(tenant), {info.id: time.time()})
        pipe.expire(names.tenant_batches_key(tenant), ttl)
        pipe.execute()
        return info

    def info(self, batch_id: str) -> BatchInfo | None:
        """The batch, whoever its tenant; None when unknown or expired."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(names.batch_key(batch_id))
        pipe.exists(names.batch_runner_key(batch_id))
        raw, running = pipe.execute()
        if not raw:
            return None
        data = {k: json.loads(v) for k, v in raw.items()}
        if data["state"] == "running" and not running:
            data["state"] = "interrupted"
        _progress(data)
        return BatchInfo.model_validate({k: data[k] for k in BatchInfo.model_fields if k in data})

    def get(self, tenant: str, batch_id: str) -> BatchInfo:
        """The batch ``batch_id`` of ``tenant``.

        Raises:
            NotFound: unknown, expired, or another tenant's batch (same answer).
        """
        info = self.info(batch_id)
        if info is None or info.tenant != tenant:
            raise NotFound(
                f"batch {batch_id!r} not found",
                operation="batches.get",
                context={"batch": batch_id},
            )
        return info

    def list(self, tenant: str) -> builtins.list[BatchInfo]:
        """The tenant's batches that have not expired, oldest first."""
        ids = self.redis.zrange(names.tenant_batches_key(tenant), 0, -1)
        found = [self.info(i) for i in ids]
        return [i for i in found if i is not None]

    def settings_of(self, batch_id: str) -> dict[str, Any]:
        """Stored fields that are not in ``BatchInfo`` (``max_attempts``, ``quotas``)."""
        raw = self.redis.hmget(names.batch_key(batch_id), ["max_attempts", "quotas"])
        return {
            "max_attempts": json.loads(raw[0] or "1"),
            "quotas": json.loads(raw[1] or "null"),
        }

    def pending(self, batch_id: str) -> builtins.list[BatchJob]:
        """The jobs without a result yet, in submission order."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(names.batch_jobs_key(batch_id), 0, -1)
        pipe.smembers(names.batch_done_key(batch_id))
        raw_jobs, done = pipe.execute()
        jobs = (BatchJob.model_validate_json(j) for j in raw_jobs)
        return [j for j in jobs if j.id not in done]

    def record(self, batch_id: str, result: BatchResult) -> bool:
        """Store a job's result; False (and nothing stored) when it already has one."""
        keys = [
            names.batch_key(batch_id),
            names.batch_done_key(batch_id),
            names.batch_results_key(batch_id),
        ]
        args = [result.id, result.model_dump_json(), _COUNTER[result.status], json.dumps(_iso())]
        stored = bool(self._record(keys=keys, args=args))
        if stored:
            metrics.BATCH_JOBS.labels(status=result.status).inc()
        return stored

    def results(self, batch_id: str, offset: int = 0, limit: int = 10_000) -> builtins.list[str]:
        """Result lines (``BatchResult`` JSON) from ``offset``, in completion order."""
        key = names.batch_results_key(batch_id)
        lines: builtins.list[str] = self.redis.lrange(key, offset, offset + limit - 1)
        return lines

    def update(self, batch_id: str, **fields: Any) -> None:
        """Set record fields (JSON-encoded)."""
        mapping: Mapping[str | bytes, bytes | float | int | str] = {
            k: json.dumps(v) for k, v in fields.items()
        }
        self.redis.hset(names.batch_key(batch_id), mapping=mapping)

    def incr(self, batch_id: str, field: str, by: int = 1) -> None:
        """Add to a counter (``retries``, ``in_flight``)."""
        self.redis.hincrby(names.batch_key(batch_id), field, by)

    def start(self, batch_id: str) -> None:
        """Mark a (re)start: rate and ETA count from here."""
        info = self.info(batch_id)
        done = info.done if info else 0
        self.update(batch_id, state="running", started_at=_iso(), done_at_start=done, in_flight=0)

    def expire_later(self, batch_id: str) -> None:
        """Keep a finished batch's keys ``ttl_s`` from now."""
        pipe = self.redis.pipeline(transaction=False)
        for key in self._keys(batch_id):
            pipe.expire(key, int(self.ttl_s))
        pipe.execute()

    # ---- the runner lease -------------------------------------------------------

    def take_runner(self, batch_id: str, owner: str, ttl_s: float) -> bool:
        """Become the batch's runner unless a live one exists."""
        key = names.batch_runner_key(batch_id)
        return bool(self.redis.set(key, owner, nx=True, px=int(ttl_s * 1000)))

    def renew_runner(self, batch_id: str, owner: str, ttl_s: float) -> bool:
        """Extend the runner lease if ``owner`` still holds it."""
        key = names.batch_runner_key(batch_id)
        if self.redis.get(key) != owner:
            return False
        return bool(self.redis.pexpire(key, int(ttl_s * 1000)))

    def release_runner(self, batch_id: str, owner: str) -> None:
        key = names.batch_runner_key(batch_id)
        if self.redis.get(key) == owner:
            self.redis.delete(key)


def _iso() -> str:
    return _now().isoformat()


def _progress(data: dict[str, Any]) -> None:
    """Fill ``rate`` (jobs/s since the last start) and ``eta_s`` from the counters."""
    done = int(data.get("ok", 0)) + int(data.get("failed", 0)) + int(data.get("errors", 0))
    started = data.get("started_at")
    if not started or data["state"] not in ("running", "cancelling"):
        return
    elapsed = (_now() - datetime.fromisoformat(started)).total_seconds()
    ran = done - int(data.get("done_at_start", 0))
    if elapsed > 0 and ran > 0:
        data["rate"] = round(ran / elapsed, 3)
        data["eta_s"] = round((int(data["total"]) - done) / data["rate"], 1)
