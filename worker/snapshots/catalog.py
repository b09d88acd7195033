"""The records of the snapshot store over an object store: manifests, pointers, transfers.

``Catalog`` is the layer the parts of the store's algorithm share (``saving``,
``transfer``, ``lifecycle``): the ``ObjectStore`` the bytes go to, the
settings of the algorithm (retention, grace, limits, pack sizes), the thread
pool for parallel transfers, this process's memory of stored blobs, and the
reads and writes of manifests and of the session pointer, and the folding out
of a snapshot its pointer carries (see ``pointer``): its blobs, then its
manifest, stored as their own objects after the turn's answer. ``SnapshotStore``
builds the public operations on top of it; nothing here knows about them, so
the modules import one way.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from typing import TypeVar

from sandgrid.errors import InfrastructureError, InvalidInput, NotFound
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore
from sandgrid.wire.settings import (
    DEFAULT_SNAPSHOT_CARRY_BYTES,
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_THREADS,
)
from worker.snapshots import pointer
from worker.snapshots.format.blobs import PACK_BYTES, SMALL_FILE_BYTES, decode, encode
from worker.snapshots.format.entries import ManifestLimits
from worker.snapshots.format.manifest import MAX_MANIFEST_BYTES, Manifest, corrupt
from worker.snapshots.known import KnownBlobs

__all__ = ["CARRY_BYTES", "DELETE_BATCH", "Catalog"]

CARRY_BYTES = DEFAULT_SNAPSHOT_CARRY_BYTES
"""A snapshot whose new blobs and manifest come to at most this many bytes
travels inside its pointer: a commit of one store round trip."""
_FOLDS_REMEMBERED = 10_000
DELETE_BATCH = 32
"""Manifests that fell out of retention are deleted this many at a time, in one
request (``ObjectStore.delete_many``): one DELETE per snapshot was a fourth of
what MinIO served per append (docs/performance.md). Until then they are
strays, as after a failure: no pointer names them, and ``settle``, ``close``
and the collector delete what is left."""

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class Catalog:
    """Manifests and pointers of every tenant's sessions in one ``ObjectStore``.

    Args:
        objects: where the bytes live.
        keep: snapshots retained per session (the pointer's history).
        gc_grace_s: unreferenced blobs younger than this survive ``gc``; reuse
            of stored content is trusted for half of it.
        limits: ceilings on one snapshot (entries, bytes, path length).
        threads: parallel blob transfers.
        small_file_bytes: files below this go into packs.
        pack_bytes: target size of a pack.
        carry_bytes: a snapshot this small is carried by its pointer (0: never).
    """

    def __init__(
        self,
        objects: ObjectStore,
        *,
        keep: int = DEFAULT_SNAPSHOT_KEEP,
        gc_grace_s: float = DEFAULT_SNAPSHOT_GC_GRACE_S,
        limits: ManifestLimits | None = None,
        threads: int = DEFAULT_SNAPSHOT_THREADS,
        small_file_bytes: int = SMALL_FILE_BYTES,
        pack_bytes: int = PACK_BYTES,
        carry_bytes: int = CARRY_BYTES,
    ) -> None:
        if keep < 1 or gc_grace_s <= 0 or threads < 1:
            raise InvalidInput(
                "keep, gc_grace_s and threads must be positive", operation="snapshot"
            )
        self.objects = objects
        self.keep = keep
        self.gc_grace_s = gc_grace_s
        self.limits = limits or ManifestLimits()
        self.threads = threads
        self.small_file_bytes = small_file_bytes
        self.pack_bytes = pack_bytes
        self.carry_bytes = carry_bytes
        self.known = KnownBlobs(fresh_s=gc_grace_s / 2)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sg-snapshots")
        self._pending: set[Future[None]] = set()
        self._pending_lock = threading.Lock()
        self._folds: OrderedDict[tuple[str, str, str], Future[None]] = OrderedDict()
        self._written: OrderedDict[tuple[str, str], pointer.Pointer] = OrderedDict()
        self._doomed: list[str] = []  # manifests retention dropped, not yet deleted

    @property
    def location(self) -> str:
        """Where the snapshots live, for messages."""
        return self.objects.location

    def close(self) -> None:
        """Stop the transfer pool (waiting for what runs), delete the manifests
        retention dropped, and close the object store."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._forget_manifests(self._take_doomed(0))
        self.objects.close()

    # ---- manifests and the pointer --------------------------------------------------

    def read_pointer(self, tenant: str, session_id: str) -> list[tuple[str, str]]:
        """The session's retained snapshots ``(name, hash)``, oldest first."""
        return pointer.read(self.objects, tenant, session_id).history

    def read_manifest(
        self, tenant: str, session_id: str, name: str, *, via_pointer: bool = False
    ) -> Manifest:
        """The manifest ``name`` of a session, validated (and its base, for a difference).

        Args:
            via_pointer: the pointer named it, so its absence is corruption, not
                ``NotFound``.

        Raises:
            NotFound: no such manifest (and not ``via_pointer``).
            SnapshotError: ``snapshot_corrupt``.
            InfrastructureError: ``store_unavailable``.
        """
        stored = self._stored_manifest(tenant, session_id, name)
        if stored is None:  # not folded out yet: its pointer may carry it
            carried = pointer.read(self.objects, tenant, session_id).carried
            if carried is not None and carried.name == name:
                return self._from_carried(tenant, session_id, carried)
            stored = self._stored_manifest(tenant, session_id, name)  # folded meanwhile
        if stored is None:
            if via_pointer:
                raise corrupt(name, "the session's pointer names a missing manifest") from None
            raise NotFound(
                f"session {session_id} has no snapshot {name}",
                operation="snapshot.restore",
                context={"session": session_id, "snapshot": name},
            )
        try:
            data = decode(stored, limit=MAX_MANIFEST_BYTES)
        except ValueError as exc:
            raise corrupt(name, str(exc)) from None
        return self._parse(tenant, session_id, name, bytes(data))

    def read_latest(
        self, tenant: str, session_id: str, ptr: pointer.Pointer | None = None
    ) -> Manifest | None:
        """The session's latest manifest (None without a snapshot): the one its
        pointer carries, or the stored one it names.

        Args:
            ptr: the session's pointer, if the caller has just read it.

        Raises:
            SnapshotError: ``snapshot_corrupt``.
            InfrastructureError: ``store_unavailable``.
        """
        ptr = ptr or pointer.read(self.objects, tenant, session_id)
        if not ptr.history:
            return None
        name = ptr.history[-1][0]
        if ptr.carried is not None:
            return self._from_carried(tenant, session_id, ptr.carried)
        return self.read_manifest(tenant, session_id, name, via_pointer=True)

    def _stored_manifest(self, tenant: str, session_id: str, name: str) -> bytes | None:
        try:
            return self.objects.get(keys.manifest_key(tenant, session_id, name))
        except KeyError:
            return None

    def _from_carried(self, tenant: str, session_id: str, carried: pointer.Carried) -> Manifest:
        """The manifest a pointer carries, validated, with the blobs it carries."""
        manifest = self._parse(tenant, session_id, carried.name, carried.manifest)
        for blob, data in carried.blobs.items():
            if manifest.blobs.get(blob) != len(data):
                raise corrupt(carried.name, f"the pointer carries blob {blob} of the wrong size")
        return dataclasses.replace(manifest, carried=carried.blobs)

    def _parse(self, tenant: str, session_id: str, name: str, data: bytes) -> Manifest:
        def load_base(base: str) -> Manifest:
            try:
                return self.read_manifest(tenant, session_id, base)
            except NotFound:
                raise corrupt(name, f"its base {base} is missing") from None

        return Manifest.from_json(
            data,
            tenant=tenant,
            session_id=session_id,
            name=name,
            limits=self.limits,
            load_base=load_base,
        )

    def write_manifest(self, manifest: Manifest) -> None:
        """Store ``manifest`` (not yet a snapshot: the pointer makes it one)."""
        key = keys.manifest_key(manifest.tenant, manifest.session_id, manifest.name)
        self.objects.put(key, encode(manifest.to_json()))

    def advance_pointer(
        self,
        manifest: Manifest,
        before: pointer.Pointer,
        carried: pointer.Carried | None = None,
    ) -> None:
        """Make ``manifest`` the latest, then delete, in the background, the
        manifests that fell out of retention (a stray left by a failure is gc's).

        What ``before`` carried is stored on its own first (``ensure_folded``):
        the new pointer names it as a stored snapshot. With ``carried``, the new
        pointer carries ``manifest`` (see ``pointer.advance``); the caller
        folds it out after (``fold_out_later``).

        Raises:
            SnapshotError: the pointer moved on since ``before`` was read.
            InfrastructureError: ``store_unavailable``.
        """
        self.ensure_folded(manifest.tenant, manifest.session_id, before)
        session = (manifest.tenant, manifest.session_id)
        try:
            dropped, after = pointer.advance(self.objects, manifest, before, self.keep, carried)
        except Exception:
            self.forget_pointer(*session)
            raise
        with self._pending_lock:
            self._written.pop(session, None)
            if after is not None and after.tag is not None:
                self._written[session] = after
                while len(self._written) > _FOLDS_REMEMBERED:
                    self._written.popitem(last=False)
        self._forget_dropped(DELETE_BATCH, [keys.manifest_key(*session, n) for n in dropped])

    def written_pointer(self, tenant: str, session_id: str) -> pointer.Pointer | None:
        """The pointer this process last wrote for the session, with its tag: what
        the next snapshot can build on without reading it (its conditional write
        still fails if another writer came in between)."""
        with self._pending_lock:
            return self._written.get((tenant, session_id))

    def forget_pointer(self, tenant: str, session_id: str) -> None:
        """Read the session's pointer afresh next time (a restore, a conflict, a delete)."""
        with self._pending_lock:
            self._written.pop((tenant, session_id), None)

    # ---- folding out what a pointer carries -----------------------------------------

    def fold_out(self, tenant: str, session_id: str, carried: pointer.Carried) -> None:
        """Store a carried snapshot's blobs, then its manifest, as their own objects.

        Idempotent (the same bytes under the same names). In this order, a
        stored manifest's blobs are always stored: a reader that finds it needs
        nothing from the pointer.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        for blob in sorted(carried.blobs):  # on the caller's thread: never waits on the pool
            self.objects.put_addressed(keys.blob_key(tenant, blob), encode(carried.blobs[blob]))
        self.objects.put(
            keys.manifest_key(tenant, session_id, carried.name), encode(carried.manifest)
        )

    def fold_out_later(
        self,
        tenant: str,
        session_id: str,
        carried: pointer.Carried,
        then: Callable[[], None] = lambda: None,
    ) -> None:
        """``fold_out`` in the background (``then`` after it succeeds); a failure is
        logged, and the next pointer write of the session folds it out again."""

        def run() -> None:
            self.fold_out(tenant, session_id, carried)
            then()

        future = self._background(run)
        with self._pending_lock:
            self._folds[(tenant, session_id, carried.name)] = future
            while len(self._folds) > _FOLDS_REMEMBERED:
                self._folds.popitem(last=False)

    def ensure_folded(self, tenant: str, session_id: str, ptr: pointer.Pointer) -> None:
        """Make sure what ``ptr`` carries is stored on its own: this process's fold-out
        of it, waited for, or (none, or it failed; another node carried it) a
        fold-out now.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        if ptr.carried is None:
            return
        with self._pending_lock:
            future = self._folds.get((tenant, session_id, ptr.carried.name))
        if future is not None and not future.cancelled() and future.exception() is None:
            return  # this process folded it out (``exception`` waits for a pending one)
        self.fold_out(tenant, session_id, ptr.carried)
        done: Future[None] = Future()
        done.set_result(None)
        with self._pending_lock:
            self._folds[(tenant, session_id, ptr.carried.name)] = done

    def _background(self, fn: Callable[[], None]) -> Future[None]:
        """Run ``fn`` on the pool, logged rather than raised, waited for by ``settle``."""

        def run() -> None:
            try:
                fn()
            except Exception as exc:
                log.warning("snapshot store work in the background failed: %s", exc)
                raise

        future = self._pool.submit(run)
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._settled)
        return future

    def _settled(self, future: Future[None]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def settle(self) -> None:
        """Delete the manifests retention dropped, and wait for the deletions and
        fold-outs started in the background."""
        self._forget_dropped(0)
        with self._pending_lock:
            pending = list(self._pending)
        wait(pending)

    def _forget_dropped(self, at_least: int, more: list[str] | None = None) -> None:
        """Add ``more`` to the manifests retention dropped, and delete them all in
        the background once there are ``at_least`` (and at least one)."""
        if batch := self._take_doomed(at_least, more):
            self._background(partial(self._forget_manifests, batch))

    def _take_doomed(self, at_least: int, more: list[str] | None = None) -> list[str]:
        """Add ``more`` to the manifests retention dropped; all of them, taken, once
        there are ``at_least`` and at least one (none taken below that)."""
        with self._pending_lock:
            self._doomed += more or []
            if len(self._doomed) < max(at_least, 1):
                return []
            batch, self._doomed = self._doomed, []
        return batch

    def _forget_manifests(self, names: list[str]) -> None:
        try:
            self.objects.delete_many(names)
        except InfrastructureError as exc:  # left to the collector, as strays
            log.warning("retention could not delete %d manifests: %s", len(names), exc)

    def delete_session(self, tenant: str, session_id: str) -> int:
        """Forget a closed session's snapshots (its blobs are left to ``gc``).

        Returns:
            How many manifests were deleted.
        """
        self.forget_pointer(tenant, session_id)
        self.objects.delete(keys.pointer_key(tenant, session_id))
        names = self.objects.list(keys.manifests_prefix(tenant, session_id))
        self.parallel(self.objects.delete, names)
        return len(names)

    # ---- the transfer pool ----------------------------------------------------------

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the transfer pool (a read that overlaps other work)."""
        return self._pool.submit(fn)

    def parallel(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``fn`` over ``items`` on the transfer pool, in order; the first error wins
        and cancels what has not started."""
        items = list(items)
        if len(items) <= 1:
            return [fn(i) for i in items]
        futures = [self._pool.submit(fn, i) for i in items]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()
