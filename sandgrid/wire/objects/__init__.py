"""Object stores: where snapshots and session records live (``base``), a directory
(``local``), MinIO (``minio``), and the layout of their keys (``keys``).

Both sides use them: a worker stores workspace snapshots, the control plane
keeps each session's record beside them (so a lost registry can be rebuilt).
``minio`` needs the ``minio`` SDK and is imported only by whoever uses it
(``open_objects`` does, when the settings name it), so importing this package
needs neither side's extra.
"""

from __future__ import annotations

from sandgrid.errors import InvalidInput
from sandgrid.wire.objects.base import ObjectStore, StoreConflict
from sandgrid.wire.objects.local import LocalObjects
from sandgrid.wire.settings import Settings

__all__ = ["LocalObjects", "ObjectStore", "StoreConflict", "open_objects"]


def open_objects(settings: Settings) -> ObjectStore:
    """The object store the settings name (MinIO's pool sized for the transfer threads).

    ``SANDGRID_WORKER__SNAPSHOT_STORE`` picks it (``minio`` or ``local``, with
    ``SANDGRID_WORKER__LOCAL_SNAPSHOT_DIR``); MinIO is ``SANDGRID_MINIO__*``.
    Opening connects to nothing: an unreachable store fails on first use.

    Raises:
        InvalidInput: another store name.
        ImportError: ``minio`` chosen but the SDK is not installed.
    """
    kind = settings.worker.snapshot_store
    if kind == "local":
        return LocalObjects(settings.worker.local_snapshot_dir)
    if kind == "minio":
        from sandgrid.wire.objects.minio import MinioObjects

        m = settings.minio
        return MinioObjects(
            m.endpoint,
            m.access_key,
            m.secret_key,
            m.bucket,
            secure=m.secure,
            connections=settings.worker.snapshots.threads + 4,
        )
    raise InvalidInput(
        f"SANDGRID_WORKER__SNAPSHOT_STORE is {kind!r}; it must be 'minio' or 'local'",
        operation="snapshot",
        context={"field": "worker.snapshot_store", "value": kind},
    )
