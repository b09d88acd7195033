"""The records of the snapshot store over an object store: manifests, pointers, transfers.

``Catalog`` is the layer the parts of the store's algorithm share (``saving``,
``transfer``, ``lifecycle``): the ``ObjectStore`` the bytes go to, the
settings of the algorithm (retention, grace, limits, pack sizes), the thread
pool for parallel transfers, this process's memory of stored blobs, and the
reads and writes of manifests and of the session pointer. ``SnapshotStore``
builds the public operations on top of it; nothing here knows about them, so
the modules import one way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from sandgrid.errors import InfrastructureError, InvalidInput, NotFound
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore
from sandgrid.wire.settings import (
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_THREADS,
)
from worker.snapshots import pointer
from worker.snapshots.format.blobs import PACK_BYTES, SMALL_FILE_BYTES, decode, encode
from worker.snapshots.format.entries import ManifestLimits
from worker.snapshots.format.manifest import MAX_MANIFEST_BYTES, Manifest, corrupt
from worker.snapshots.known import KnownBlobs

__all__ = ["Catalog"]

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
        self.known = KnownBlobs(fresh_s=gc_grace_s / 2)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sg-snapshots")
        self._pending: set[Future[None]] = set()
        self._pending_lock = threading.Lock()

    @property
    def location(self) -> str:
        """Where the snapshots live, for messages."""
        return self.objects.location

    def close(self) -> None:
        """Stop the transfer pool (waiting for what runs) and close the object store."""
        self._pool.shutdown(wait=True, cancel_futures=True)
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
        try:
            stored = self.objects.get(keys.manifest_key(tenant, session_id, name))
        except KeyError:
            if via_pointer:
                raise corrupt(name, "the session's pointer names a missing manifest") from None
            raise NotFound(
                f"session {session_id} has no snapshot {name}",
                operation="snapshot.restore",
                context={"session": session_id, "snapshot": name},
            ) from None
        try:
            data = decode(stored, limit=MAX_MANIFEST_BYTES)
        except ValueError as exc:
            raise corrupt(name, str(exc)) from None

        def load_base(base: str) -> Manifest:
            try:
                return self.read_manifest(tenant, session_id, base)
            except NotFound:
                raise corrupt(name, f"its base {base} is missing") from None

        return Manifest.from_json(
            bytes(data),
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

    def advance_pointer(self, manifest: Manifest, before: pointer.Pointer) -> None:
        """Make ``manifest`` the latest, then delete, in the background, the
        manifests that fell out of retention (a stray left by a failure is gc's).

        Raises:
            SnapshotError: the pointer moved on since ``before`` was read.
            InfrastructureError: ``store_unavailable``.
        """
        for name in pointer.advance(self.objects, manifest, before, self.keep):
            key = keys.manifest_key(manifest.tenant, manifest.session_id, name)
            future = self._pool.submit(self._forget_manifest, key)
            with self._pending_lock:
                self._pending.add(future)
            future.add_done_callback(self._settled)

    def _settled(self, future: Future[None]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def settle(self) -> None:
        """Wait for the deletions retention started in the background."""
        with self._pending_lock:
            pending = list(self._pending)
        wait(pending)

    def _forget_manifest(self, key: str) -> None:
        try:
            self.objects.delete(key)
        except InfrastructureError as exc:
            log.warning("retention could not delete %s: %s", key, exc)

    def delete_session(self, tenant: str, session_id: str) -> int:
        """Forget a closed session's snapshots (its blobs are left to ``gc``).

        Returns:
            How many manifests were deleted.
        """
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
