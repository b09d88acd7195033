"""Snapshot stores for tests: the real ``SnapshotStore`` over a local directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sandgrid.wire.objects import LocalObjects
from sandgrid.wire.settings import DEFAULT_SNAPSHOT_THREADS
from worker.snapshots import SnapshotStore

__all__ = ["local_store", "minio_store"]


def local_store(root: Path | str, **options: Any) -> SnapshotStore:
    """A ``SnapshotStore`` over ``LocalObjects(root)`` (``options``: keep, threads...)."""
    return SnapshotStore(LocalObjects(root), **options)


def minio_store(
    endpoint: str,
    access_key: str,
    secret_key: str,
    bucket: str,
    *,
    secure: bool = False,
    **options: Any,
) -> SnapshotStore:
    """A ``SnapshotStore`` over ``MinioObjects`` (a pool sized for its threads, as
    ``open_store`` makes it)."""
    from sandgrid.wire.objects.minio import MinioObjects

    threads = options.get("threads", DEFAULT_SNAPSHOT_THREADS)
    objects = MinioObjects(
        endpoint, access_key, secret_key, bucket, secure=secure, connections=threads + 4
    )
    return SnapshotStore(objects, **options)
