"""Workspace snapshots: content-addressed, incremental, verified, per tenant.

The modules import one way (a layers contract in pyproject.toml holds it), bottom to top:

- ``format/``: pure data (entries, manifests, deltas, tars, blob encoding);
- ``sandgrid.wire.objects``: where the bytes live (shared with the control
  plane, which keeps session records there), ``ObjectStore`` with
  ``LocalObjects`` and ``MinioObjects`` (imported lazily), and ``keys``, the
  layout of the store;
- ``pointer``, ``known``, ``refs``, ``catalog``: a session's pointer, the
  memory of stored blobs, what the store hands back, manifests and pointers
  over an ``ObjectStore``;
- ``transfer``, ``saving``, ``lifecycle``: the algorithm, in parts;
- ``store``: ``SnapshotStore``, the algorithm's public operations;
- ``sandbox``: ``SandboxFiles``, what snapshots need from a sandbox;
- ``sync``: ``snapshot_sandbox`` and ``restore_sandbox``, what the worker
  executor calls. ``open_store`` builds the store the settings name.
"""

from __future__ import annotations

from sandgrid.wire.objects import open_objects
from sandgrid.wire.settings import Settings, get_settings
from worker.snapshots.format.archive import WorkspaceChanged
from worker.snapshots.format.entries import Entry, ManifestLimits
from worker.snapshots.format.manifest import Location, Manifest
from worker.snapshots.refs import GcReport, SnapshotDraft, SnapshotRef
from worker.snapshots.sandbox import SandboxFiles
from worker.snapshots.store import DEFAULT_ROOTS, SnapshotStore
from worker.snapshots.sync import restore_sandbox, snapshot_sandbox

__all__ = [
    "DEFAULT_ROOTS",
    "Entry",
    "GcReport",
    "Location",
    "Manifest",
    "ManifestLimits",
    "SandboxFiles",
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
    settings = settings or get_settings()
    snap = settings.worker.snapshots
    return SnapshotStore(
        open_objects(settings),
        keep=snap.keep,
        gc_grace_s=snap.gc_grace_s,
        limits=ManifestLimits(max_files=snap.max_files, max_bytes=snap.max_bytes),
        threads=snap.threads,
        carry_bytes=snap.carry_bytes,
    )
