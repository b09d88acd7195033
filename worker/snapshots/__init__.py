"""Workspace snapshots: content-addressed, incremental, verified, per tenant.

``SnapshotStore`` (``base``) owns the algorithm over six storage primitives;
``LocalStore`` (``local``) and ``MinioStore`` (``minio``, imported lazily so
that this package does not need the SDK) implement them. The worker executor
calls ``snapshot_sandbox`` and ``restore_sandbox`` (``workspace``);
``open_store`` builds the store the settings name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandgrid.wire.settings import Settings, get_settings
from worker.snapshots.archive import WorkspaceChanged
from worker.snapshots.base import DEFAULT_ROOTS, SnapshotStore
from worker.snapshots.entries import Entry, ManifestLimits
from worker.snapshots.hostdir import HostDirBackend
from worker.snapshots.local import LocalStore
from worker.snapshots.manifest import Location, Manifest
from worker.snapshots.refs import GcReport, SnapshotDraft, SnapshotRef
from worker.snapshots.workspace import SnapshotBackend, restore_sandbox, snapshot_sandbox

if TYPE_CHECKING:
    from worker.snapshots.minio import MinioStore

__all__ = [
    "DEFAULT_ROOTS",
    "Entry",
    "GcReport",
    "HostDirBackend",
    "LocalStore",
    "Location",
    "Manifest",
    "ManifestLimits",
    "MinioStore",
    "SnapshotBackend",
    "SnapshotDraft",
    "SnapshotRef",
    "SnapshotStore",
    "WorkspaceChanged",
    "open_store",
    "restore_sandbox",
    "snapshot_sandbox",
]


def open_store(settings: Settings | None = None) -> SnapshotStore:
    """The snapshot store of ``SANDGRID_WORKER__SNAPSHOT_STORE`` (``minio`` or ``local``).

    Raises:
        InvalidInput: another store name.
        ImportError: ``minio`` chosen but the SDK is not installed.
    """
    from sandgrid.errors import InvalidInput

    settings = settings or get_settings()
    snap = settings.worker.snapshots
    options: dict[str, Any] = {
        "keep": snap.keep,
        "gc_grace_s": snap.gc_grace_s,
        "limits": ManifestLimits(max_files=snap.max_files, max_bytes=snap.max_bytes),
        "threads": snap.threads,
    }
    kind = settings.worker.snapshot_store
    if kind == "local":
        return LocalStore(settings.worker.local_snapshot_dir, **options)
    if kind == "minio":
        from worker.snapshots.minio import MinioStore

        m = settings.minio
        return MinioStore(
            m.endpoint, m.access_key, m.secret_key, m.bucket, secure=m.secure, **options
        )
    raise InvalidInput(
        f"SANDGRID_WORKER__SNAPSHOT_STORE is {kind!r}; it must be 'minio' or 'local'",
        operation="snapshot",
        context={"field": "worker.snapshot_store", "value": kind},
    )


def __getattr__(name: str) -> Any:
    """``MinioStore`` on first use, so that importing this package never needs ``minio``."""
    if name == "MinioStore":
        from worker.snapshots.minio import MinioStore

        return MinioStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
