"""Blob transfers of the snapshot store: what to upload, parallel uploads, verified downloads.

Part of ``SnapshotStore``'s algorithm, kept apart to keep ``base`` readable.
Each blob is one task on the store's thread pool, and each task does its CPU
work too (hashing, zlib), which releases the GIL: a restore of 100 MB runs its
downloads, inflation and verification on every core, which is how it beats a
single ``tar | gzip`` stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterable, Mapping
from functools import partial

from sandgrid.errors import ErrorCode, SnapshotError
from sandgrid.wire.objects import keys
from worker.snapshots.catalog import Catalog, Note
from worker.snapshots.format.archive import WorkspaceChanged
from worker.snapshots.format.blobs import decode, encode, group_files, pack_name
from worker.snapshots.format.entries import Entry
from worker.snapshots.format.manifest import Location, Manifest
from worker.snapshots.format.restoretars import RestorePlan, layout_restore, plan_restore, tar_of
from worker.snapshots.refs import SnapshotDraft

__all__ = [
    "OVERLAP_HEAD_BYTES",
    "STREAM_RESTORE_BYTES",
    "blob_bytes",
    "classify",
    "notes",
    "plan",
    "put_blob",
    "referenced",
    "remember",
    "restore_plan",
]

STREAM_RESTORE_BYTES = 256 << 20
"""A restore of more than this (of files, or of blobs) goes in parts, each
downloaded and verified just before it is sent (see ``restore_plan``)."""
OVERLAP_HEAD_BYTES = 4 << 20
"""A large content up to this is packed while its HEAD is in flight (the HEAD,
a store round trip, costs more than the channel carries meanwhile); a larger
one waits for its HEAD, so a content stored already never crosses the channel."""


def classify(catalog: Catalog, draft: SnapshotDraft, trusted: Manifest | None) -> None:
    """Split the draft's files into contents already stored (reused) and ``draft.need``.

    Reuse comes from the previous manifest while the pointer retains it, from
    this process's memory while fresh, or (large files only) from a HEAD of the
    blob while fresh; anything else is uploaded again (see ``lifecycle`` for
    why "fresh" keeps reuse safe from garbage collection). A HEAD of a content
    up to ``OVERLAP_HEAD_BYTES`` is not waited for: the content stays in
    ``need`` (it is packed while the HEAD runs) until ``plan`` settles it.
    """
    heads: dict[str, Entry] = {}
    candidates: Iterable[Entry] = draft.entries
    if trusted is not None and draft.change is not None:  # only the change is new
        draft.where.update(trusted.where)
        draft.blobs.update(trusted.blobs)
        candidates = draft.change.added
    for e in candidates:
        sha = e.sha256
        if e.type != "file" or sha is None or sha in draft.where or sha in draft.need:
            continue
        if sha in heads:
            continue
        if trusted is not None and sha in trusted.where:
            loc = trusted.where[sha]
            _reuse(draft, sha, loc, trusted.blobs[loc.blob])
        elif (hit := catalog.known.get(draft.tenant, sha, draft.started)) is not None:
            _reuse(draft, sha, hit.location, hit.blob_size)
        elif e.size >= catalog.small_file_bytes:
            heads[sha] = e
        else:
            draft.need[sha] = e
    overlap = {s: e for s, e in heads.items() if e.size <= OVERLAP_HEAD_BYTES}
    for sha, e in overlap.items():  # packed meanwhile; settled by ``plan``
        draft.need[sha] = e
        head = partial(catalog.objects.mtime, keys.blob_key(draft.tenant, sha))
        draft.heads[sha] = catalog.submit(head)
    waited = [s for s in heads if s not in overlap]
    stamps = catalog.parallel(
        lambda s: catalog.objects.mtime(keys.blob_key(draft.tenant, s)), waited
    )
    for sha, stamp in zip(waited, stamps, strict=True):
        if not _stored_fresh(catalog, draft, sha, heads[sha], stamp):
            draft.need[sha] = heads[sha]


def _stored_fresh(
    catalog: Catalog, draft: SnapshotDraft, sha: str, e: Entry, stamp: float | None
) -> bool:
    """Whether a HEAD's answer lets the content be reused (it is then noted)."""
    if stamp is None or stamp < draft.started - catalog.known.fresh_s:
        return False
    catalog.known.put(draft.tenant, sha, Location(sha, 0), e.size, stamp)
    _reuse(draft, sha, Location(sha, 0), e.size)
    return True


def _settle_heads(catalog: Catalog, draft: SnapshotDraft) -> None:
    """The HEADs ``classify`` left in flight: a content found stored and fresh
    leaves ``need`` (its packed bytes are not uploaded)."""
    heads, draft.heads = draft.heads, {}
    for sha, head in heads.items():
        e = draft.need.get(sha)
        if e is not None and _stored_fresh(catalog, draft, sha, e, head.result()):
            del draft.need[sha]


def referenced(draft: SnapshotDraft) -> tuple[dict[str, Location], dict[str, int]]:
    """``draft.where`` and ``draft.blobs`` cut down to the files of the new tree.

    After an incremental ``prepare`` this costs the size of the change: the
    previous manifest's counts of files per content and contents per blob are
    updated, and what falls to zero is dropped (the counts go to ``draft.known``).
    """
    previous, change = draft.previous, draft.change
    if previous is None or change is None:
        where: dict[str, Location] = {}
        blobs: dict[str, int] = {}
        for e in draft.entries:
            if e.sha256 is not None and e.sha256 not in where:
                loc = where[e.sha256] = draft.where[e.sha256]
                blobs[loc.blob] = draft.blobs[loc.blob]
        return where, blobs
    where, blobs = draft.where, draft.blobs  # the draft's own: cut down in place
    shas, holds = dict(previous.sha_refs), dict(previous.blob_refs)
    for a in change.added:  # first, so a content that moves is never dropped
        if a.sha256 is not None:
            if a.sha256 not in shas:
                holds[where[a.sha256].blob] = holds.get(where[a.sha256].blob, 0) + 1
            shas[a.sha256] = shas.get(a.sha256, 0) + 1
    for e in change.gone:
        if e.sha256 is None:
            continue
        shas[e.sha256] -= 1
        if not shas[e.sha256]:
            del shas[e.sha256]
            blob = where.pop(e.sha256).blob
            holds[blob] -= 1
            if not holds[blob]:
                del holds[blob]
    draft.known.update(sha_refs=shas, blob_refs=holds)
    return where, {b: blobs[b] for b in holds}


def _reuse(draft: SnapshotDraft, sha: str, loc: Location, blob_size: int) -> None:
    draft.where[sha] = loc
    draft.blobs[loc.blob] = blob_size


def plan(catalog: Catalog, draft: SnapshotDraft) -> list[tuple[str, list[Entry]]]:
    """Group the contents of ``draft.need`` into blobs and record where each goes.

    A blob's name is known before any byte is read: a file alone is named by
    its sha256, and a pack by ``pack_name`` of its members. So the manifest can
    be written while the blobs upload.

    Returns:
        ``(blob, files)`` of every blob to upload.

    Raises:
        InfrastructureError: ``store_unavailable``, from a HEAD in flight.
    """
    _settle_heads(catalog, draft)
    groups = group_files(draft.need.values(), catalog.small_file_bytes, catalog.pack_bytes)
    out: list[tuple[str, list[Entry]]] = []
    for group in groups:
        blob = str(group[0].sha256) if len(group) == 1 else pack_name(group)
        offset = 0
        for e in group:
            draft.where[str(e.sha256)] = Location(blob, offset)
            offset += e.size
        draft.blobs[blob] = offset
        out.append((blob, group))
    return out


def notes(draft: SnapshotDraft, uploaded: Iterable[tuple[str, list[Entry]]]) -> list[Note]:
    """The contents of blobs uploaded for the draft, with where each is."""
    return [
        (str(e.sha256), draft.where[str(e.sha256)], draft.blobs[blob])
        for blob, group in uploaded
        for e in group
    ]


def remember(
    catalog: Catalog, draft: SnapshotDraft, uploaded: Iterable[tuple[str, list[Entry]]]
) -> None:
    """Note the contents of blobs just stored, for later snapshots to reuse."""
    catalog.remember(draft.tenant, notes(draft, uploaded))


def put_blob(
    catalog: Catalog,
    tenant: str,
    blob: str,
    group: list[Entry],
    contents: Mapping[str, bytes],
) -> None:
    """Verify a blob's files against the scan, then store it.

    Raises:
        WorkspaceChanged: some bytes do not hash to what the scan said.
    """
    catalog.objects.put_addressed(keys.blob_key(tenant, blob), encode(blob_bytes(group, contents)))


def blob_bytes(group: list[Entry], contents: Mapping[str, bytes]) -> bytes:
    """A blob's raw bytes: its files' contents, each verified against the scan.

    Raises:
        WorkspaceChanged: some bytes do not hash to what the scan said.
    """
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
    return parts[0] if len(parts) == 1 else b"".join(parts)


def restore_plan(
    catalog: Catalog,
    manifest: Manifest,
    max_tar_bytes: int,
    large_file_bytes: int | None,
    stream_bytes: int,
) -> Generator[RestorePlan, None, None]:
    """The restore of ``manifest`` in parts, each downloaded (in parallel) and
    verified before it is yielded.

    Up to ``stream_bytes`` of files (and of blobs) it is one part, made once every
    blob has verified: nothing reaches the sandbox before the whole snapshot is
    known good. Above, memory would grow with the workspace (every blob, then
    every tar), so each part is one tar, then one large file at a time, then the
    ``modes`` tar: a restore holds about ``max_tar_bytes`` of content (twice
    while a tar is joined), the blobs in flight (one per thread of the store's
    pool, which every restore of the node shares) and one large file's blob,
    whatever the size of the workspace. A pack that two tars need is downloaded
    for each.

    Why one pass in parts, where a part can fail after earlier ones were sent,
    rather than a first pass that verifies everything and a second that
    downloads again to send: the extra pass would double the downloads, the
    inflating and the hashing of every large restore, and the failure after
    the sandbox was touched would remain (the store can go down, a blob be
    damaged or collected, between the passes). Such a failure says
    ``sandbox_dirty`` (``sync.restore_sandbox``), and the executor
    destroys the sandbox of any failed restore, touched or not; so nothing half
    restored is ever used. The first part is still verified before anything
    is sent.

    Raises:
        SnapshotError: ``snapshot_corrupt`` for a missing, undecodable or
            mismatching blob, or a file whose bytes do not hash to its sha256.
    """
    if max(manifest.total_bytes, sum(manifest.blobs.values())) <= stream_bytes:
        yield _whole(catalog, manifest, max_tar_bytes, large_file_bytes)
        return
    layout = layout_restore(
        manifest.entries,
        mtime=manifest.created,
        max_bytes=max_tar_bytes,
        large_bytes=large_file_bytes,
    )
    for members in layout.tars:
        yield _tar_part(catalog, manifest, members)
    for e in layout.large:
        loc = manifest.where[str(e.sha256)]
        data = _fetch(catalog, manifest, loc.blob, {(str(e.sha256), loc.offset, e.size)})
        yield RestorePlan([], [(e, data[loc.offset : loc.offset + e.size])], [])
        del data  # not held while the next one downloads
    if layout.modes:
        yield RestorePlan([], [], layout.modes)


def _whole(
    catalog: Catalog, manifest: Manifest, max_tar_bytes: int, large_file_bytes: int | None
) -> RestorePlan:
    """The restore in one part: every blob downloaded and verified first."""
    members: dict[str, set[tuple[str, int, int]]] = {}
    for e in manifest.files():
        loc = manifest.where[str(e.sha256)]
        members.setdefault(loc.blob, set()).add((str(e.sha256), loc.offset, e.size))
    names = sorted(members)
    fetched = catalog.parallel(lambda b: _fetch(catalog, manifest, b, members[b]), names)
    blobs = dict(zip(names, fetched, strict=True))

    def content(e: Entry) -> memoryview:
        loc = manifest.where[str(e.sha256)]
        return blobs[loc.blob][loc.offset : loc.offset + e.size]

    return plan_restore(
        manifest.entries,
        content,
        mtime=manifest.created,
        max_bytes=max_tar_bytes,
        large_bytes=large_file_bytes,
    )


def _tar_part(
    catalog: Catalog, manifest: Manifest, members: list[tuple[Entry, bytes]]
) -> RestorePlan:
    """One tar of a restore in parts: its files' blobs downloaded and verified, and
    what the tar needs copied out of each, so that no blob outlives its download."""
    wanted: dict[str, set[tuple[str, int, int]]] = {}
    for e, _ in members:
        if e.type == "file":
            loc = manifest.where[str(e.sha256)]
            wanted.setdefault(loc.blob, set()).add((str(e.sha256), loc.offset, e.size))

    def extract(blob: str) -> dict[str, bytes | memoryview]:
        data = _fetch(catalog, manifest, blob, wanted[blob])
        return {s: data if s == blob else bytes(data[o : o + n]) for s, o, n in wanted[blob]}

    contents: dict[str, bytes | memoryview] = {}
    for part in catalog.parallel(extract, sorted(wanted)):
        contents.update(part)
    return RestorePlan([tar_of(members, lambda e: contents[str(e.sha256)])], [], [])


def _fetch(
    catalog: Catalog, manifest: Manifest, blob: str, members: set[tuple[str, int, int]]
) -> memoryview:
    data = _blob_data(catalog, manifest, blob)
    whole = any(sha == blob for sha, _, _ in members)  # a file's own blob, else a pack
    if whole and hashlib.sha256(data).hexdigest() != blob:
        raise _corrupt(manifest, f"blob {blob} does not match its sha256")
    for sha, offset, size in members:
        if sha != blob and hashlib.sha256(data[offset : offset + size]).hexdigest() != sha:
            raise _corrupt(manifest, f"content {sha} in blob {blob} does not match its sha256")
    return data


def _blob_data(catalog: Catalog, manifest: Manifest, blob: str) -> memoryview:
    """A blob's bytes: carried with the manifest (its pointer carries it), or stored."""
    if blob in manifest.carried:
        return memoryview(manifest.carried[blob])  # its size was checked on reading
    try:
        stored = catalog.objects.get(keys.blob_key(manifest.tenant, blob))
    except KeyError:
        raise _corrupt(manifest, f"blob {blob} is missing") from None
    try:
        return decode(stored, size=manifest.blobs[blob])
    except ValueError as exc:
        raise _corrupt(manifest, f"blob {blob} does not decode: {exc}") from None


def _corrupt(manifest: Manifest, why: str) -> SnapshotError:
    return SnapshotError(
        f"snapshot {manifest.session_id}/{manifest.name} is refused: {why}",
        code=ErrorCode.SNAPSHOT_CORRUPT,
        operation="snapshot.restore",
        context={"session": manifest.session_id, "snapshot": manifest.name},
    )
