"""A grid of real processes for the benchmarks: one scheduler and Celery workers
on loopback, on a Redis db of their own (flushed before and after), with the
machine's generated credentials when it has them (``_services``)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import redis
from _services import grid_env, shared_redis_url

from sandgrid.localgrid import LocalGrid


@contextlib.contextmanager
def bench_grid(
    *,
    port: int,
    redis_url: str,
    token: str,
    nodes: list[str],
    concurrency: int,
    types: str = "python",
    store: str = "local",
    pool_size: int = 4,
) -> Iterator[LocalGrid]:
    """Start the grid (tenant ``bench`` with ``token``, the snapshot ``store``:
    ``local`` or ``minio``, ``pool_size`` warm sandboxes per type of ``types``,
    comma-separated; 0: every session starts cold), yield it, stop it."""
    url = shared_redis_url(redis_url)
    r: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
    r.flushdb()
    with tempfile.TemporaryDirectory(prefix="bench-grid-") as tmp:
        grid = LocalGrid(
            Path(tmp),
            port=port,
            redis_url=url,
            tenants={"bench": token},
            env={
                **grid_env(url),
                "SANDGRID_WORKER__POOL_SIZE": str(pool_size),
                **({"SANDGRID_WORKER__POOL_MAX": "0"} if pool_size == 0 else {}),
                "SANDGRID_WORKER__SNAPSHOT_STORE": store,
            },
        )
        try:
            grid.start(nodes, types=types, concurrency=concurrency)
            yield grid
        finally:
            grid.stop()
            r.flushdb()
