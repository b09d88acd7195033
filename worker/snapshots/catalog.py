"""The records of the snapshot store over an object store: manifests, pointers, transfers.

``Catalog`` is the layer the parts of the store's algorithm share (``saving``,
``transfer``, ``lifecycle``): the ``ObjectStore`` the bytes go to, the
settings of the algorithm (retention, grace, limits, pack sizes), the thread
pool for parallel transfers, this process's memory of stored blobs, the
reads of manifests (``reads``), the writes of the session pointer, and the
chain of small snapshots a pointer carries (see ``pointer``): what the next
pointer carries, and its folding out (the blobs, then the manifests, stored
as their own objects after a turn's answer once the chain passes
``fold_bytes``). ``SnapshotStore`` builds the public operations on top of it;
nothing here knows about them, so the modules import one way."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import partial
from typing import TypeVar

from sandgrid.errors import InfrastructureError, InvalidInput, SnapshotError
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore
from sandgrid.wire.settings import (
    DEFAULT_SNAPSHOT_CARRY_BYTES,
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_THREADS,
)
from worker.snapshots import pointer
from worker.snapshots.format.blobs import PACK_BYTES, SMALL_FILE_BYTES, encode
from worker.snapshots.format.entries import ManifestLimits
from worker.snapshots.format.manifest import Location, Manifest
from worker.snapshots.known import KnownBlobs
from worker.snapshots.reads import ManifestReads

__all__ = ["CARRY_BYTES", "DELETE_BATCH", "Catalog", "Note"]

CARRY_BYTES = DEFAULT_SNAPSHOT_CARRY_BYTES
"""A snapshot whose new blobs and manifest come to at most this many bytes
travels inside its pointer: a commit of one store round trip. The chain a
pointer carries stays within it too, and is folded out once past half of it."""
_FOLDS_REMEMBERED = 10_000
DELETE_BATCH = 32
"""Manifests that fell out of retention are deleted this many at a time, in one
request (``ObjectStore.delete_many``): one DELETE per snapshot was a fourth of
what MinIO served per append (docs/performance.md). Until then they are
strays, as after a failure: no pointer names them, and ``settle``, ``close``
and the collector delete what is left."""

log = logging.getLogger(__name__)
T = TypeVar("T")
Note = tuple[str, Location, int]
"""A content a carried blob holds: ``(sha256, where it is, the blob's size)``,
noted in ``known`` once the blob is stored."""
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")


class Catalog(ManifestReads):
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
        fold_bytes: a carried chain past this is folded out after its write
            (None: half of ``carry_bytes``; 0: every chain, at once).
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
        fold_bytes: int | None = None,
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
        self.fold_bytes = carry_bytes // 2 if fold_bytes is None else fold_bytes
        self.known = KnownBlobs(fresh_s=gc_grace_s / 2)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sg-snapshots")
        self._pending: set[Future[None]] = set()
        self._pending_lock = threading.Lock()
        self._folds: OrderedDict[tuple[str, str, tuple[str, ...]], Future[None]] = OrderedDict()
        self._notes: OrderedDict[tuple[str, str, str], list[Note]] = OrderedDict()
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

    def advance_pointer(
        self,
        manifest: Manifest,
        before: pointer.Pointer,
        carried: pointer.Carried | None = None,
        notes: list[Note] | None = None,
    ) -> None:
        """Make ``manifest`` the latest, then delete, in the background, the
        manifests that fell out of retention (a stray left by a failure is gc's).

        With ``carried`` (``manifest`` itself, and the blobs it added) the new
        pointer carries it after the chain ``before`` carries (``_chain``);
        without, ``manifest`` and its blobs must be stored already, and what
        ``before`` carried is stored first (``ensure_folded``). A chain past
        ``fold_bytes`` is folded out after the write (``fold_out_later``).

        Args:
            notes: the contents of the blobs ``carried`` adds, noted in ``known``
                once they are stored.

        Raises:
            SnapshotError: the pointer moved on since ``before`` was read.
            InfrastructureError: ``store_unavailable``.
        """
        session = (manifest.tenant, manifest.session_id)
        chain, unstored = self._chain(manifest, before, carried)
        try:
            dropped, after = pointer.advance(self.objects, manifest, before, self.keep, chain)
        except Exception:
            self.forget_pointer(*session)
            raise
        stored = [n for n in dropped if n not in unstored]
        with self._pending_lock:
            self._written.pop(session, None)
            if after is not None and after.tag is not None:
                self._written[session] = after
                _bound(self._written)
            for name in dropped:
                self._notes.pop((*session, name), None)
            if carried is not None and notes:
                self._notes[(*session, manifest.name)] = notes
                _bound(self._notes)
        self._forget_dropped(DELETE_BATCH, [keys.manifest_key(*session, n) for n in stored])
        if after is not None and after.carried and after.carried.size > self.fold_bytes:
            self.fold_out_later(*session, after.carried)

    def _chain(
        self, manifest: Manifest, before: pointer.Pointer, new: pointer.Carried | None
    ) -> tuple[pointer.Carried | None, set[str]]:
        """What the pointer that makes ``manifest`` the latest carries: ``new`` after
        the chain ``before`` carries, cut to what retention keeps, while that fits
        the carry budget and no fold-out of the chain has started; else ``new``
        alone, once what ``before`` carried is stored. And the snapshots of
        ``before`` that are not stored (those carried on: retention drops them
        with nothing to delete)."""
        prior = before.carried
        if prior is not None and new is not None:
            with self._pending_lock:
                folding = self._fold_key(manifest.tenant, manifest.session_id, prior) in self._folds
            if not folding:
                kept, _ = pointer.retain(before, manifest, self.keep)
                chain = prior.then(new).kept({n for n, _ in kept.history})
                if chain is not None and chain.size <= self.carry_bytes:
                    return chain, set(prior.manifests)
        self.ensure_folded(manifest.tenant, manifest.session_id, before)
        return new, set()

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
        """Store a carried chain's blobs, then its manifests (oldest first), as their
        own objects, and note the blobs' contents in ``known``.

        Idempotent (the same bytes under the same names). In this order, a
        stored manifest's blobs are always stored: a reader that finds it needs
        nothing from the pointer.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        for blob in sorted(carried.blobs):  # on the caller's thread: never waits on the pool
            self.objects.put_addressed(keys.blob_key(tenant, blob), encode(carried.blobs[blob]))
        for name, doc in carried.manifests.items():
            self.objects.put(keys.manifest_key(tenant, session_id, name), encode(doc))
        with self._pending_lock:
            notes = [self._notes.pop((tenant, session_id, n), []) for n in carried.manifests]
        self.remember(tenant, [note for some in notes for note in some])

    def remember(self, tenant: str, notes: Iterable[Note]) -> None:
        """Note stored contents in ``known``, for later snapshots to reuse."""
        stamp = time.time()
        for sha, location, blob_size in notes:
            self.known.put(tenant, sha, location, blob_size, stamp)

    def fold_out_later(self, tenant: str, session_id: str, carried: pointer.Carried) -> None:
        """``fold_out`` in the background; a failure is logged, and the next pointer
        write of the session folds it out again."""
        future = self._background(partial(self.fold_out, tenant, session_id, carried))
        with self._pending_lock:
            self._folds[self._fold_key(tenant, session_id, carried)] = future
            _bound(self._folds)

    def ensure_folded(self, tenant: str, session_id: str, ptr: pointer.Pointer) -> None:
        """Make sure what ``ptr`` carries is stored on its own: this process's fold-out
        of it, waited for, or (none, or it failed; another node carried it) a
        fold-out now.

        Raises:
            InfrastructureError: ``store_unavailable``.
        """
        if ptr.carried is None:
            return
        key = self._fold_key(tenant, session_id, ptr.carried)
        with self._pending_lock:
            future = self._folds.get(key)
        if future is not None and not future.cancelled() and future.exception() is None:
            return  # this process folded it out (``exception`` waits for a pending one)
        self.fold_out(tenant, session_id, ptr.carried)
        done: Future[None] = Future()
        done.set_result(None)
        with self._pending_lock:
            self._folds[key] = done
            _bound(self._folds)

    @staticmethod
    def _fold_key(
        tenant: str, session_id: str, carried: pointer.Carried
    ) -> tuple[str, str, tuple[str, ...]]:
        return tenant, session_id, tuple(carried.manifests)

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
            How many snapshots were deleted: manifests stored on their own, and
            those its pointer carried.
        """
        self.forget_pointer(tenant, session_id)
        try:
            carried = pointer.read(self.objects, tenant, session_id).carried
        except SnapshotError:  # an unreadable pointer is deleted all the same
            carried = None
        self.objects.delete(keys.pointer_key(tenant, session_id))
        names = self.objects.list(keys.manifests_prefix(tenant, session_id))
        self.parallel(self.objects.delete, names)
        stored = {p[1] for k in names if (p := keys.parse_session_key(tenant, k)) and p[1]}
        return len(stored.union(carried.manifests if carried else ()))

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


def _bound(remembered: OrderedDict[K, V]) -> None:
    """Forget the oldest of what this process remembers past ``_FOLDS_REMEMBERED``."""
    while len(remembered) > _FOLDS_REMEMBERED:
        remembered.popitem(last=False)
