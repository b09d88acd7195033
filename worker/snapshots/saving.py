"""Taking a snapshot: ``prepare`` (what changed, what to upload) and ``commit``.

Part of ``SnapshotStore``'s algorithm (see its ``prepare`` and ``commit`` for
the contract), kept apart to keep ``base`` readable. A change from the
previous manifest is found by ``delta``; blobs are planned, uploaded and
remembered by ``transfer``; the pointer is advanced by ``pointer``.

A small snapshot (new blobs and manifest within ``Catalog.carry_bytes``) is one
store round trip: the pointer's conditional write carries the manifest and the
new blobs' bytes, after the small snapshots it carried already (a chain,
stored on its own once past half the budget: ``Catalog.advance_pointer``). A
larger one is two: the blobs in parallel, then the pointer that must never
name what is not stored, carrying the manifest when that fits (else the
manifest is stored beside the blobs).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from sandgrid.errors import InvalidInput, SnapshotError
from sandgrid.wire.objects import keys
from worker.snapshots import pointer, transfer
from worker.snapshots.catalog import Catalog
from worker.snapshots.format import delta
from worker.snapshots.format.entries import Entry, Row, check_roots, entries_from_scan, scan_rows
from worker.snapshots.format.manifest import Delta, Manifest, group_by_parent, group_hash, tree_hash
from worker.snapshots.pointer import Carried
from worker.snapshots.refs import SnapshotDraft, SnapshotRef, make_ref

__all__ = ["commit", "prepare"]


def prepare(
    catalog: Catalog,
    tenant: str,
    session_id: str,
    scan: Sequence[Any],
    previous: Manifest | None,
    roots: Sequence[str],
) -> SnapshotDraft | None:
    """See ``SnapshotStore.prepare``."""
    keys.check_id("tenant", tenant)
    keys.check_id("session_id", session_id)
    roots_t = check_roots(list(roots))
    rows = scan_rows(scan)
    change = None
    if previous is not None:
        _check_owner(previous, tenant, session_id)
        if previous.roots == roots_t and rows == list(previous.entries):
            return None
    started = time.time()
    reading = _pointer(catalog, tenant, session_id, previous)
    if previous is not None:
        change = delta.diff(previous, rows, roots_t, catalog.limits)
    entries, digest, known = _new_tree(catalog, rows, roots_t, change)
    if previous is not None and previous.hash == digest:
        return None
    latest = reading.result()
    history = latest.history
    if previous is None and history:
        if history[-1][1] == digest:
            return None
        previous, change = _from_latest(catalog, latest, tenant, session_id, rows, roots_t)
    names = {n for n, _ in history}
    trusted = previous if previous and previous.name in names else None
    draft = SnapshotDraft(
        tenant=tenant,
        session_id=session_id,
        roots=roots_t,
        entries=entries,
        hash=digest,
        seq=(int(history[-1][0][:12]) if history else 0) + 1,
        parent=f"{session_id}/{previous.name}" if previous else None,
        where={},
        blobs={},
        need={},
        started=started,
        known=known,
        previous=trusted,
        change=change if trusted else None,
        pointer=latest,
    )
    transfer.classify(catalog, draft, trusted)
    return draft


def _from_latest(
    catalog: Catalog,
    latest: pointer.Pointer,
    tenant: str,
    session_id: str,
    rows: list[Row],
    roots: tuple[str, ...],
) -> tuple[Manifest, delta.Change | None]:
    """The stored latest (a node that holds no previous manifest: a restore
    elsewhere, say) and the change from it."""
    previous = catalog.read_latest(tenant, session_id, latest)
    assert previous is not None  # the pointer has a history
    return previous, delta.diff(previous, rows, roots, catalog.limits)


def _pointer(
    catalog: Catalog, tenant: str, session_id: str, previous: Manifest | None
) -> Future[pointer.Pointer]:
    """The session's pointer: the one this process wrote last, when it names
    ``previous`` as the latest (no round trip), else read on the pool."""
    written = catalog.written_pointer(tenant, session_id)
    if previous is not None and written is not None and written.history[-1][0] == previous.name:
        known: Future[pointer.Pointer] = Future()
        known.set_result(written)
        return known
    return catalog.submit(partial(pointer.read, catalog.objects, tenant, session_id))


def _new_tree(
    catalog: Catalog, rows: list[Row], roots: tuple[str, ...], change: delta.Change | None
) -> tuple[tuple[Entry, ...], str, dict[str, Any]]:
    """The new tree's entries, hash and derived views: from the change when there
    is one, else from the whole scan, validated in full."""
    if change is not None:
        return change.entries, change.hash, change.known()
    entries = entries_from_scan(rows, roots, catalog.limits)
    groups = group_by_parent(entries)
    hashes = {d: group_hash(g) for d, g in groups.items()}
    return entries, tree_hash(roots, hashes), {"groups": groups, "hashes": hashes}


def commit(catalog: Catalog, draft: SnapshotDraft, contents: Mapping[str, bytes]) -> SnapshotRef:
    """See ``SnapshotStore.commit``."""
    t0 = time.perf_counter()
    missing = [e.path for sha, e in draft.need.items() if sha not in contents]
    if missing:
        raise SnapshotError(
            f"commit lacks the bytes of {missing[:5]}", operation="snapshot", context={}
        )
    uploads = transfer.plan(catalog, draft)
    _check_fresh(catalog, draft)
    where, blobs = transfer.referenced(draft)  # also fills draft.known
    stored = _stored_as(draft)
    manifest = Manifest(
        tenant=draft.tenant,
        session_id=draft.session_id,
        seq=draft.seq,
        snapshot_id=secrets.token_hex(6),
        created=time.time(),
        parent=draft.parent,
        roots=draft.roots,
        entries=draft.entries,
        hash=draft.hash,
        where=where,
        blobs=blobs,
        base=stored[0] if stored else None,
        delta=stored[1] if stored else None,
        known=draft.known,
    )

    carried = _carry(catalog, manifest, uploads, contents)
    if carried is None:
        carried = _store_first(catalog, draft, manifest, uploads, contents)
    _check_fresh(catalog, draft)
    notes = transfer.notes(draft, [u for u in uploads if carried and u[0] in carried.blobs])
    catalog.advance_pointer(manifest, draft.pointer, carried, notes)
    stats = {
        "files": manifest.file_count,
        "stored_entries": len(manifest.entries) if stored is None else stored[1].size,
        "bytes": manifest.total_bytes,
        "uploaded_blobs": len(uploads),
        "uploaded_bytes": sum(draft.blobs[b] for b, _ in uploads),
        "carried": float(carried is not None),
        "carried_blobs": len(carried.blobs) if carried is not None else 0,
        "commit_ms": (time.perf_counter() - t0) * 1000,
    }
    return make_ref(manifest, stats)


def _store_first(
    catalog: Catalog,
    draft: SnapshotDraft,
    manifest: Manifest,
    uploads: list[tuple[str, list[Entry]]],
    contents: Mapping[str, bytes],
) -> Carried | None:
    """Store the new blobs, too large to ride the pointer, in parallel: what the
    pointer then carries is the manifest alone, or nothing when the manifest is
    too large as well (it is stored beside the blobs: no snapshot before the
    pointer names it)."""
    doc = _carried_manifest(catalog.carry_bytes, manifest)

    def put(job: tuple[str, list[Entry]] | None) -> None:
        if job is None:
            catalog.write_manifest(manifest)
        else:
            transfer.put_blob(catalog, draft.tenant, job[0], job[1], contents)

    catalog.parallel(put, [*([] if doc is not None else [None]), *uploads])
    transfer.remember(catalog, draft, uploads)
    return None if doc is None else Carried.of(manifest, doc, {})


def _carried_manifest(budget: int, manifest: Manifest) -> bytes | None:
    """The manifest's stored JSON when it fits in ``budget`` bytes of a pointer."""
    if budget <= 0 or (manifest.delta is None and len(manifest.entries) * 64 > budget):
        return None  # no need to serialise a big full manifest to know
    doc = manifest.to_json()
    return doc if len(doc) <= budget else None


def _carry(
    catalog: Catalog,
    manifest: Manifest,
    uploads: list[tuple[str, list[Entry]]],
    contents: Mapping[str, bytes],
) -> Carried | None:
    """What the pointer carries of a snapshot small enough to travel in it (its
    blobs verified as an upload's would be), or None to store its blobs first."""
    doc = _carried_manifest(
        catalog.carry_bytes - sum(manifest.blobs.get(b, 0) for b, _ in uploads), manifest
    )
    if doc is None:
        return None
    return Carried.of(
        manifest, doc, {blob: transfer.blob_bytes(group, contents) for blob, group in uploads}
    )


def _check_fresh(catalog: Catalog, draft: SnapshotDraft) -> None:
    """Refuse to write a manifest or pointer later than half the GC grace after
    the snapshot started (see ``lifecycle`` for why)."""
    if time.time() - draft.started > catalog.known.fresh_s:
        raise SnapshotError(
            "the snapshot took longer than half the GC grace period; take it again",
            operation="snapshot",
            retryable=True,
        )


def _stored_as(draft: SnapshotDraft) -> tuple[str, Delta] | None:
    """``(base, difference)`` when the new manifest can be stored as a difference:
    it follows the pointer's latest, whose base the pointer still retains."""
    previous, change = draft.previous, draft.change
    if previous is None or change is None or draft.history[-1][0] != previous.name:
        return None
    if previous.base is not None and previous.base not in {n for n, _ in draft.history}:
        return None
    return delta.next_delta(previous, change)


def _check_owner(manifest: Manifest, tenant: str, session_id: str) -> None:
    if (manifest.tenant, manifest.session_id) != (tenant, session_id):
        raise InvalidInput(
            "the previous manifest belongs to another tenant or session",
            operation="snapshot",
            context={"field": "previous"},
        )
