"""The bridge between a sandbox and the snapshot store: what the worker executor calls.

The sandbox side is three calls of the backend (served by the in-sandbox agent,
see docs/agent-protocol.md): ``scan`` (the manifest entries, hashes cached by
the agent), ``pack`` (a tar.gz of some files) and ``unpack`` (a tar into the
roots). A snapshot asks ``pack`` only for contents the store does not have; a
restore verifies everything before the first ``unpack``.

Payloads are cut to fit the agent's frame: ``pack`` is asked for at most
``PACK_BATCH_BYTES`` of files at a time and ``unpack`` gets tars of at most
``archive.MAX_TAR_BYTES`` (the first one clears the roots).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, Protocol

from scheduler.errors import ErrorCode, SnapshotError
from worker.snapshots.archive import MAX_TAR_BYTES, WorkspaceChanged, read_packed
from worker.snapshots.base import DEFAULT_ROOTS, SnapshotStore
from worker.snapshots.entries import Entry
from worker.snapshots.manifest import Manifest
from worker.snapshots.refs import SnapshotDraft, SnapshotRef

__all__ = ["PACK_BATCH_BYTES", "SnapshotBackend", "restore_sandbox", "snapshot_sandbox"]

PACK_BATCH_BYTES = 32 << 20
"""Files asked of one ``pack``: its reply must fit the agent's 46 MiB payload."""
_ATTEMPTS = 2


class SnapshotBackend(Protocol):
    """The part of ``worker.backends.base.SandboxBackend`` that snapshots use."""

    def scan(self, sbx: Any, roots: list[str]) -> Sequence[Any]:
        """Rows ``(path, type, mode, size, sha256, target)`` (or mappings with those keys)."""

    def pack(self, sbx: Any, paths: list[str]) -> bytes: ...

    def unpack(self, sbx: Any, data: bytes, roots: list[str], clear: bool) -> int: ...


def snapshot_sandbox(
    backend: SnapshotBackend,
    sbx: Any,
    store: SnapshotStore,
    tenant: str,
    session_id: str,
    previous: Manifest | None,
    *,
    roots: Sequence[str] = DEFAULT_ROOTS,
) -> SnapshotRef | None:
    """Snapshot the sandbox's workspace if it changed.

    Args:
        previous: the manifest the sandbox was last restored from or snapshotted
            to (``ref.manifest`` of the last snapshot); with it, an unchanged
            workspace costs one scan and no store round trip.

    Returns:
        The new snapshot (its ``manifest`` is the next ``previous``), or None
        when nothing changed since ``previous`` (or, without it, since the
        stored latest).

    Raises:
        InvalidInput: the workspace breaks a limit or has entries leaving the roots.
        SnapshotError: the sandbox's archive was refused, or files kept changing.
        InfrastructureError: ``store_unavailable``.
        SandboxError: from the backend.
    """
    for attempt in range(1, _ATTEMPTS + 1):
        t0 = time.perf_counter()
        scan = backend.scan(sbx, list(roots))
        t1 = time.perf_counter()
        draft = store.prepare(tenant, session_id, scan, previous, roots=roots)
        if draft is None:
            return None
        t2 = time.perf_counter()
        try:
            contents = _pack(backend, sbx, draft)
            t3 = time.perf_counter()
            ref = store.commit(draft, contents)
        except WorkspaceChanged:
            if attempt == _ATTEMPTS:
                raise
            continue
        stats = {
            **ref.stats,
            "scan_ms": (t1 - t0) * 1000,
            "prepare_ms": (t2 - t1) * 1000,
            "pack_ms": (t3 - t2) * 1000,
            "total_ms": (time.perf_counter() - t0) * 1000,
            "attempts": attempt,
        }
        return dataclasses.replace(ref, stats=stats)
    raise AssertionError("unreachable")  # pragma: no cover


def _pack(backend: SnapshotBackend, sbx: Any, draft: SnapshotDraft) -> dict[str, bytes]:
    """The bytes of every content the store lacks, asked in frame-sized batches."""
    contents: dict[str, bytes] = {}
    batch: dict[str, Entry] = {}
    used = 0
    needed = sorted(draft.need.values(), key=lambda e: e.path)
    for i, e in enumerate(needed):
        batch[e.path] = e
        used += e.size
        last = i == len(needed) - 1
        if last or used + needed[i + 1].size > PACK_BATCH_BYTES:
            contents.update(read_packed(backend.pack(sbx, list(batch)), batch))
            batch, used = {}, 0
    return contents


def restore_sandbox(
    backend: SnapshotBackend,
    sbx: Any,
    store: SnapshotStore,
    tenant: str,
    session_id: str,
    ref: SnapshotRef | str | None,
    *,
    roots: Sequence[str] = DEFAULT_ROOTS,
) -> Manifest:
    """Make the sandbox's roots exactly what a snapshot holds.

    The manifest and every blob are fetched and verified before the sandbox is
    touched; a bad snapshot leaves the sandbox as it was.

    Args:
        ref: the snapshot (a ref or its name), or None for the latest.
        roots: the roots a snapshot may hold; a manifest naming others is refused.

    Returns:
        The restored manifest: the ``previous`` of the next snapshot.

    Raises:
        NotFound: no such snapshot.
        SnapshotError: ``snapshot_corrupt`` when verification fails (sandbox
            untouched); ``snapshot_failed`` with ``context["sandbox_dirty"]``
            when ``unpack`` failed: the sandbox may hold part of the snapshot
            and must be discarded.
        InfrastructureError: ``store_unavailable`` (sandbox untouched).
    """
    manifest = store.load(tenant, session_id, ref)
    if not set(manifest.roots) <= set(roots):
        raise SnapshotError(
            f"snapshot {manifest.name} is refused: its roots {list(manifest.roots)} "
            f"are not among {list(roots)}",
            code=ErrorCode.SNAPSHOT_CORRUPT,
            operation="snapshot.restore",
            context={"snapshot": manifest.name},
        )
    tars = store.restore_tars(manifest, max_tar_bytes=MAX_TAR_BYTES)
    roots = list(manifest.roots)
    for i, data in enumerate(tars):
        try:
            backend.unpack(sbx, data, roots, i == 0)
        except Exception as exc:
            raise SnapshotError(
                f"restoring snapshot {manifest.name} into the sandbox failed: {exc}; "
                "discard the sandbox",
                code=ErrorCode.SNAPSHOT_FAILED,
                operation="snapshot.restore",
                context={"snapshot": manifest.name, "sandbox_dirty": True, "part": i},
            ) from exc
    return manifest
