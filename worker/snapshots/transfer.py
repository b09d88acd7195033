"""Blob transfers of the snapshot store: what to upload, parallel uploads, verified downloads.

Part of ``SnapshotStore``'s algorithm, kept apart to keep ``base`` readable.
Each blob is one task on the store's thread pool, and each task does its CPU
work too (hashing, zlib), which releases the GIL: a restore of 100 MB runs its
downloads, inflation and verification on every core, which is how it beats a
single ``tar | gzip`` stream.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from scheduler.errors import ErrorCode, SnapshotError
from worker.snapshots import keys
from worker.snapshots.archive import WorkspaceChanged, build_tars
from worker.snapshots.blobs import decode, encode, group_files
from worker.snapshots.entries import Entry
from worker.snapshots.manifest import Location, Manifest

if TYPE_CHECKING:
    from worker.snapshots.base import SnapshotStore
    from worker.snapshots.refs import SnapshotDraft

__all__ = ["classify", "restore_tars", "upload"]


def classify(store: SnapshotStore, draft: SnapshotDraft, trusted: Manifest | None) -> None:
    """Split the draft's files into contents already stored (reused) and ``draft.need``.

    Reuse comes from the previous manifest while the pointer retains it, from
    this process's memory while fresh, or (large files only) from a HEAD of the
    blob while fresh; anything else is uploaded again (see ``lifecycle`` for
    why "fresh" keeps reuse safe from garbage collection).
    """
    heads: dict[str, Entry] = {}
    for e in draft.entries:
        sha = e.sha256
        if e.type != "file" or sha is None or sha in draft.where or sha in draft.need:
            continue
        if sha in heads:
            continue
        if trusted is not None and sha in trusted.where:
            loc = trusted.where[sha]
            _reuse(draft, sha, loc, trusted.blobs[loc.blob])
        elif (hit := store.known.get(draft.tenant, sha, draft.started)) is not None:
            _reuse(draft, sha, hit.location, hit.blob_size)
        elif e.size >= store.small_file_bytes:
            heads[sha] = e
        else:
            draft.need[sha] = e
    stamps = store._parallel(lambda s: store._mtime(keys.blob_key(draft.tenant, s)), list(heads))
    for (sha, e), stamp in zip(heads.items(), stamps, strict=True):
        if stamp is not None and stamp >= draft.started - store.known.fresh_s:
            store.known.put(draft.tenant, sha, Location(sha, 0), e.size, stamp)
            _reuse(draft, sha, Location(sha, 0), e.size)
        else:
            draft.need[sha] = e


def _reuse(draft: SnapshotDraft, sha: str, loc: Location, blob_size: int) -> None:
    draft.where[sha] = loc
    draft.blobs[loc.blob] = blob_size


def upload(
    store: SnapshotStore, draft: SnapshotDraft, contents: Mapping[str, bytes]
) -> dict[str, int]:
    """Store every content of ``draft.need`` in blobs and record where each went.

    Returns:
        The uploaded blobs and their sizes.

    Raises:
        WorkspaceChanged: some bytes do not hash to what the scan said.
    """
    groups = group_files(draft.need.values(), store.small_file_bytes, store.pack_bytes)
    stamp = time.time()
    results = store._parallel(lambda g: _store_group(store, draft.tenant, g, contents), groups)
    uploaded: dict[str, int] = {}
    for group, (blob, size) in zip(groups, results, strict=True):
        offset = 0
        for e in group:
            sha = str(e.sha256)
            loc = Location(blob, offset)
            draft.where[sha] = loc
            store.known.put(draft.tenant, sha, loc, size, stamp)
            offset += e.size
        draft.blobs[blob] = size
        uploaded[blob] = size
    return uploaded


def _store_group(
    store: SnapshotStore, tenant: str, group: list[Entry], contents: Mapping[str, bytes]
) -> tuple[str, int]:
    parts: list[bytes] = []
    for e in group:
        data = contents[str(e.sha256)]
        if len(data) != e.size or hashlib.sha256(data).hexdigest() != e.sha256:
            raise WorkspaceChanged(
                f"{e.path} changed while it was being snapshotted",
                operation="snapshot",
                context={"path": e.path},
            )
        parts.append(data)
    if len(parts) == 1:
        blob, sha = parts[0], str(group[0].sha256)
    else:
        blob = b"".join(parts)
        sha = hashlib.sha256(blob).hexdigest()
    store._put(keys.blob_key(tenant, sha), encode(blob))
    return sha, len(blob)


def restore_tars(store: SnapshotStore, manifest: Manifest, max_tar_bytes: int) -> list[bytes]:
    """Download and verify every blob of ``manifest`` in parallel, then build the tars.

    Raises:
        SnapshotError: ``snapshot_corrupt`` for a missing, undecodable or
            mismatching blob, or a file whose bytes do not hash to its sha256.
    """
    members: dict[str, set[tuple[str, int, int]]] = {}
    for e in manifest.files():
        loc = manifest.where[str(e.sha256)]
        members.setdefault(loc.blob, set()).add((str(e.sha256), loc.offset, e.size))
    names = sorted(members)
    fetched = store._parallel(lambda b: _fetch(store, manifest, b, members[b]), names)
    blobs = dict(zip(names, fetched, strict=True))

    def content(e: Entry) -> memoryview:
        loc = manifest.where[str(e.sha256)]
        return blobs[loc.blob][loc.offset : loc.offset + e.size]

    return build_tars(manifest.entries, content, mtime=manifest.created, max_bytes=max_tar_bytes)


def _fetch(
    store: SnapshotStore, manifest: Manifest, blob: str, members: set[tuple[str, int, int]]
) -> memoryview:
    try:
        stored = store._get(keys.blob_key(manifest.tenant, blob))
    except KeyError:
        raise _corrupt(manifest, f"blob {blob} is missing") from None
    try:
        data = decode(stored, size=manifest.blobs[blob])
    except ValueError as exc:
        raise _corrupt(manifest, f"blob {blob} does not decode: {exc}") from None
    if hashlib.sha256(data).hexdigest() != blob:
        raise _corrupt(manifest, f"blob {blob} does not match its sha256")
    for sha, offset, size in members:
        if sha != blob and hashlib.sha256(data[offset : offset + size]).hexdigest() != sha:
            raise _corrupt(manifest, f"content {sha} in blob {blob} does not match its sha256")
    return data


def _corrupt(manifest: Manifest, why: str) -> SnapshotError:
    return SnapshotError(
        f"snapshot {manifest.session_id}/{manifest.name} is refused: {why}",
        code=ErrorCode.SNAPSHOT_CORRUPT,
        operation="snapshot.restore",
        context={"session": manifest.session_id, "snapshot": manifest.name},
    )
