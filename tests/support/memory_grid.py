"""The real grid of the memory snapshot tests (issue 24): MinIO, a bucket of their own.

``tests/integration/test_memory_grid.py`` and ``test_memory_fork_grid.py`` run
the API and worker nodes on the real Docker with gVisor, Redis and the MinIO of
``make services``; this is their one copy of the store's settings, the store
itself (to corrupt an image) and the grid's start and clean-up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

from sandgrid.localgrid import LocalGrid
from tests.support.one_node_grid import flushed_redis
from worker.quotas import LABEL_WORKER
from worker.templates.warm import NODE_LABEL

__all__ = ["MINIO", "memory_grid", "minio_objects", "store_env"]

MINIO = {  # the MinIO of ``make services``; its credentials from tests/conftest.py
    f"SANDGRID_MINIO__{name}": os.environ.get(f"SANDGRID_MINIO__{name}", default)
    for name, default in (
        ("ENDPOINT", "127.0.0.1:9000"),
        ("ACCESS_KEY", "sandgrid"),
        ("SECRET_KEY", "sandgrid-secret"),
    )
}


def store_env(bucket: str) -> dict[str, str]:
    """A worker's settings for snapshots and memory images in ``bucket`` of that MinIO."""
    return {"SANDGRID_WORKER__SNAPSHOT_STORE": "minio", "SANDGRID_MINIO__BUCKET": bucket, **MINIO}


def minio_objects(bucket: str) -> Any:
    """The bucket's objects, as the workers see them."""
    from sandgrid.wire.objects.minio import MinioObjects

    return MinioObjects(
        MINIO["SANDGRID_MINIO__ENDPOINT"],
        MINIO["SANDGRID_MINIO__ACCESS_KEY"],
        MINIO["SANDGRID_MINIO__SECRET_KEY"],
        bucket,
    )


@contextlib.contextmanager
def memory_grid(
    docker_client: Any,
    grid: LocalGrid,
    *,
    bucket: str,
    start: Sequence[str],
    nodes: Sequence[str],
    types: str,
    concurrency: int,
) -> Iterator[LocalGrid]:
    """``grid`` started with the ``start`` nodes on a flushed Redis; after, every
    process stopped, every container of ``nodes`` removed (their sandboxes, and the
    warm build sandbox of a node killed last, which no later start of it collected)
    and the bucket dropped."""
    with flushed_redis(grid.env["SANDGRID_REDIS_URL"]):
        try:
            grid.start(list(start), types=types, concurrency=concurrency)
            yield grid
        finally:
            grid.stop()
            for node in nodes:
                for key in (LABEL_WORKER, NODE_LABEL):
                    label = {"label": f"{key}={node}"}
                    for row in docker_client.api.containers(all=True, filters=label):
                        docker_client.api.remove_container(row["Id"], force=True)
            with contextlib.suppress(Exception):
                minio_objects(bucket).drop_bucket()
