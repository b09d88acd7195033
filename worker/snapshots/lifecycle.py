"""Fork and garbage collection of the snapshot store (part of ``SnapshotStore``'s algorithm).

Why collection is safe while other workers take snapshots, with no lock:

- ``collect`` deletes a blob only if no retained or in-flight manifest names it
  *and* it was last written more than ``gc_grace_s`` before the collection
  started (``cutoff``).
- A snapshot reuses stored content only (a) from the previous manifest while
  the session's pointer still retains it, or (b) when the blob was written less
  than ``gc_grace_s / 2`` before the snapshot started (the process's memory or a
  HEAD), and ``commit`` refuses to write a manifest more than ``gc_grace_s / 2``
  after the start. So a blob reused under (b) is younger than the grace when the
  manifest appears, and a collection that missed that manifest (it started
  earlier) keeps the blob. Under (a), the previous manifest is read by the
  collection, unless retention deleted it in between, which makes the
  collection start over (``_Raced``) rather than guess.
- New blobs are young by definition; a manifest written before its pointer is
  an in-flight snapshot and counts while it is young.

Clocks: blob ages come from the store, the cutoff from this host; the default
grace (an hour) dwarfs any sane skew.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time

from sandgrid.errors import ErrorCode, InvalidInput, NotFound, SnapshotError
from sandgrid.wire.objects import keys
from worker.snapshots import pointer
from worker.snapshots.catalog import Catalog
from worker.snapshots.format.blobs import decode
from worker.snapshots.format.manifest import MANIFEST_VERSION, MAX_MANIFEST_BYTES, Manifest
from worker.snapshots.pointer import Pointer
from worker.snapshots.refs import GcReport, SnapshotRef, make_ref

__all__ = ["collect", "copy_manifest", "fork"]

_ATTEMPTS = 3


class _Raced(Exception):
    """A retained manifest vanished during collection: start over."""


def fork(catalog: Catalog, tenant: str, src: str, dst: str) -> SnapshotRef:
    """Copy the latest manifest of ``src`` to ``dst`` (see ``SnapshotStore.fork``)."""
    keys.check_id("tenant", tenant)
    keys.check_id("session_id", src)
    keys.check_id("session_id", dst)
    if src == dst:
        raise InvalidInput("a session cannot be forked into itself", operation="snapshot.fork")
    source_ptr = pointer.read(catalog.objects, tenant, src)
    source = catalog.read_latest(tenant, src, source_ptr)
    if source is None:
        raise NotFound(
            f"session {src} has no snapshot to fork", operation="snapshot.fork", context={}
        )
    if catalog.read_pointer(tenant, dst):
        raise InvalidInput(
            f"session {dst} already has snapshots; fork into a new session",
            operation="snapshot.fork",
            context={"field": "dst_session"},
        )
    name = source.name
    catalog.ensure_folded(tenant, src, source_ptr)  # the copy names its blobs
    copy = copy_manifest(source, dst, 1, parent=f"{src}/{name}")
    catalog.write_manifest(copy)
    catalog.advance_pointer(copy, Pointer([], {}))
    if name not in {n for n, _ in catalog.read_pointer(tenant, src)}:
        _prove_blobs(catalog, copy)
    return make_ref(copy)


def copy_manifest(source: Manifest, session_id: str, seq: int, *, parent: str) -> Manifest:
    """``source`` as snapshot ``seq`` of ``session_id``: a full manifest, a new id, now."""
    return dataclasses.replace(
        source,
        session_id=session_id,
        seq=seq,
        snapshot_id=secrets.token_hex(6),
        created=time.time(),
        parent=parent,
        base=None,
        delta=None,
        carried={},
    )


def _prove_blobs(catalog: Catalog, copy: Manifest) -> None:
    """The source moved on during the fork: its blobs may be collectable, so each
    must still exist and be young enough that a collection will keep it."""
    horizon = time.time() - catalog.known.fresh_s
    blobs = list(copy.blobs)
    stamps = catalog.parallel(lambda b: catalog.objects.mtime(keys.blob_key(copy.tenant, b)), blobs)
    if all(s is not None and s >= horizon for s in stamps):
        return
    catalog.delete_session(copy.tenant, copy.session_id)
    raise SnapshotError(
        "the source session changed during the fork; fork again",
        operation="snapshot.fork",
        retryable=True,
    )


def collect(catalog: Catalog, tenant: str, now: float) -> GcReport:
    """Delete stray manifests and unreferenced blobs of ``tenant`` (see the module doc).

    Raises:
        SnapshotError: a retained manifest cannot be read (collection would be
            guesswork), or snapshots kept racing it.
        InfrastructureError: ``store_unavailable``.
    """
    keys.check_id("tenant", tenant)
    for _ in range(_ATTEMPTS):
        try:
            return _collect_once(catalog, tenant, now - catalog.gc_grace_s)
        except _Raced:
            now = time.time()
    raise SnapshotError(
        f"gc of tenant {tenant} raced with snapshots {_ATTEMPTS} times; run it again",
        operation="snapshot.gc",
        retryable=True,
    )


def _collect_once(catalog: Catalog, tenant: str, cutoff: float) -> GcReport:
    listed: dict[str, set[str]] = {}
    for key in catalog.objects.list(keys.sessions_prefix(tenant)):
        parsed = keys.parse_session_key(tenant, key)
        if parsed is not None:
            listed.setdefault(parsed[0], set()).update([parsed[1]] if parsed[1] else [])
    retained: set[tuple[str, str]] = set()
    strays: list[tuple[str, str]] = []
    carried: set[str] = set()  # the blobs of snapshots pointers carry
    for session, names in listed.items():
        ptr = pointer.read(catalog.objects, tenant, session)
        history = {n for n, _ in ptr.history}
        strays += [(session, n) for n in sorted(names - history)]
        if ptr.carried is not None:  # their blobs are read from the pointer, folded out or not
            carried = carried.union(*ptr.carried.refs.values())
            history -= set(ptr.carried.manifests)
        retained |= {(session, n) for n in history}
    ages = catalog.parallel(
        lambda sn: catalog.objects.mtime(keys.manifest_key(tenant, *sn)), strays
    )
    old = [sn for sn, age in zip(strays, ages, strict=True) if age is not None and age < cutoff]
    young = [sn for sn, age in zip(strays, ages, strict=True) if age is not None and age >= cutoff]
    refs = catalog.parallel(
        lambda sn: _blobs_of(catalog, tenant, sn, sn in retained), [*retained, *young]
    )
    referenced = carried.union(*refs)
    catalog.parallel(lambda sn: catalog.objects.delete(keys.manifest_key(tenant, *sn)), old)
    prefix = keys.blobs_prefix(tenant)
    unreferenced = [k for k in catalog.objects.list(prefix) if k[len(prefix) :] not in referenced]
    stamps = catalog.parallel(catalog.objects.mtime, unreferenced)
    doomed = [k for k, s in zip(unreferenced, stamps, strict=True) if s is not None and s < cutoff]
    catalog.parallel(catalog.objects.delete, doomed)
    catalog.known.forget(tenant, [k[len(prefix) :] for k in doomed])
    return GcReport(
        manifests_deleted=len(old),
        blobs_deleted=len(doomed),
        blobs_referenced=len(referenced),
        blobs_young=len(unreferenced) - len(doomed),
    )


def _blobs_of(catalog: Catalog, tenant: str, sn: tuple[str, str], required: bool) -> set[str]:
    """The blobs a manifest names; lenient on entries, strict on being readable."""
    session, name = sn
    try:
        stored = catalog.objects.get(keys.manifest_key(tenant, session, name))
    except KeyError:
        if required:
            raise _Raced() from None
        return set()
    try:
        data = bytes(decode(stored, limit=MAX_MANIFEST_BYTES))
    except ValueError as exc:
        raise _unreadable(session, name, exc) from None
    return _blob_names(data, session, name)


def _blob_names(data: bytes, session: str, name: str) -> set[str]:
    """The blobs a manifest's JSON lists (every blob of its snapshot)."""
    try:
        doc = json.loads(data)
        if doc["v"] != MANIFEST_VERSION:
            raise ValueError(f"unknown manifest version {doc['v']!r}")
        return {str(blob) for blob, _ in doc["blobs"]}
    except (ValueError, TypeError, KeyError) as exc:
        raise _unreadable(session, name, exc) from None


def _unreadable(session: str, name: str, exc: Exception) -> SnapshotError:
    return SnapshotError(
        f"gc stopped: manifest {session}/{name} is unreadable ({exc}); "
        "its blobs cannot be told apart from garbage",
        code=ErrorCode.SNAPSHOT_CORRUPT,
        operation="snapshot.gc",
        context={"session": session, "snapshot": name},
    )
