"""The snapshot store: the algorithm lives here, backends fill in eight primitives.

``SnapshotStore`` owns everything that must be the same on every backend:
tenant namespacing and id checks (``keys``), entry rules and limits
(``entries``), manifests (``manifest``), content addressing, packing and dedupe
(``blobs``, ``transfer``), incremental snapshots (``delta``, ``saving``),
parallel transfers, verification on restore, the session pointer and
retention (``pointer``), fork and garbage collection (``lifecycle``). A backend
implements ``_put``, ``_get``, ``_get_tagged``, ``_put_if`` (a conditional
write, for the pointer), ``_exists``, ``_mtime``, ``_list``, ``_delete`` over
some object namespace, raising ``KeyError`` for a missing key and
``InfrastructureError`` (``store_unavailable``) when the store cannot be
reached: it must not keep a broken connection, so the next call can succeed.

A snapshot is two calls, so that the sandbox is asked only for what is missing
(see ``workspace.snapshot_sandbox``): ``prepare`` validates a scan, compares it
with the previous manifest (a turn that changed nothing stops there, without a
round trip; one that changed a little costs about what it changed) and lists
the files whose content is not stored yet; ``commit`` takes their bytes,
verifies them, uploads them and the manifest in parallel, then writes the
session's pointer. Until the pointer names it, a manifest is not a snapshot.

Retention: the pointer holds the last ``keep`` snapshot names (and the full
manifests those stored as differences need); an older one is deleted when it
falls out. Its blobs are left to ``gc``; see there for why collection is safe
against snapshots in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from sandgrid.errors import InfrastructureError, InvalidInput, NotFound
from sandgrid.wire.settings import (
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_THREADS,
)
from worker.agent.limits import ROOTS
from worker.snapshots import keys, lifecycle, pointer, saving, transfer
from worker.snapshots.archive import MAX_TAR_BYTES, RestorePlan
from worker.snapshots.blobs import PACK_BYTES, SMALL_FILE_BYTES, KnownBlobs, decode, encode
from worker.snapshots.entries import (
    ManifestLimits,
)
from worker.snapshots.manifest import MAX_MANIFEST_BYTES, Manifest, corrupt
from worker.snapshots.pointer import StoreConflict
from worker.snapshots.refs import GcReport, SnapshotDraft, SnapshotRef

__all__ = [
    "DEFAULT_ROOTS",
    "GcReport",
    "SnapshotDraft",
    "SnapshotRef",
    "SnapshotStore",
    "StoreConflict",
]

DEFAULT_ROOTS = ROOTS
"""What a snapshot holds: the agent's roots (``worker.agent.limits.ROOTS``)."""

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


class SnapshotStore(ABC):
    """Snapshots of session workspaces, per tenant, on some object store.

    Args:
        keep: snapshots retained per session (the pointer's history).
        gc_grace_s: unreferenced blobs younger than this survive ``gc``; reuse
            of stored content is trusted for half of it.
        limits: ceilings on one snapshot (entries, bytes, path length).
        threads: parallel blob transfers.
        small_file_bytes: files below this go into packs.
        pack_bytes: target size of a pack.
    """

    location: str = "?"

    def __init__(
        self,
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

    # ---- primitives (one object namespace) ------------------------------------------

    @abstractmethod
    def _put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (readers see all of it or the old one)."""

    @abstractmethod
    def _get(self, key: str) -> bytes:
        """The bytes under ``key``; ``KeyError`` if there are none."""

    @abstractmethod
    def _get_tagged(self, key: str) -> tuple[bytes, str]:
        """The bytes under ``key`` and a tag of this version of them (an ETag);
        ``KeyError`` if there are none."""

    @abstractmethod
    def _put_if(self, key: str, data: bytes, tag: str | None) -> None:
        """``_put``, only if the version under ``key`` still has ``tag`` (None: only
        if there is none); ``StoreConflict`` otherwise, and nothing written."""

    @abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abstractmethod
    def _mtime(self, key: str) -> float | None:
        """When ``key`` was last written (epoch seconds), None if absent."""

    @abstractmethod
    def _list(self, prefix: str) -> list[str]:
        """Every key that starts with ``prefix``, in any order."""

    @abstractmethod
    def _delete(self, key: str) -> None:
        """Remove ``key``; absent is not an error."""

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- snapshot -------------------------------------------------------------------

    def prepare(
        self,
        tenant: str,
        session_id: str,
        scan: Sequence[Any],
        previous: Manifest | None,
        *,
        roots: Sequence[str] = DEFAULT_ROOTS,
    ) -> SnapshotDraft | None:
        """Validate a scan and find what must be uploaded to snapshot it.

        Args:
            scan: the sandbox's ``scan`` rows ``(path, type, mode, size, sha256,
                target)``, or mappings with those keys.
            previous: the session's manifest as the worker last saw it (restored
                or snapshotted), or None to compare with the stored latest.

        Returns:
            None when the tree equals ``previous`` (no store round trip) or the
            stored latest; otherwise a draft for ``commit``.

        Raises:
            InvalidInput: a bad id, an entry leaving the roots, a limit exceeded,
                or a ``previous`` of another tenant or session.
            InfrastructureError: ``store_unavailable``.
        """
        return saving.prepare(self, tenant, session_id, scan, previous, roots)

    def commit(self, draft: SnapshotDraft, contents: Mapping[str, bytes]) -> SnapshotRef:
        """Upload the missing contents, then write the manifest and the pointer.

        Args:
            draft: ``prepare``'s result.
            contents: the bytes of every content in ``draft.need``, by sha256.

        Raises:
            WorkspaceChanged: some bytes do not hash to what the scan said (retryable).
            SnapshotError: contents missing, or the snapshot took so long that
                reused blobs may have been collected (retryable).
            InfrastructureError: ``store_unavailable``.
        """
        return saving.commit(self, draft, contents)

    # ---- restore --------------------------------------------------------------------

    def load(self, tenant: str, session_id: str, ref: SnapshotRef | str | None = None) -> Manifest:
        """The manifest of a snapshot of this session (the latest if ``ref`` is None),
        fully validated: ids, ownership, entries, hash, completeness.

        Raises:
            InvalidInput: a bad id or name, or a ref of another tenant or session.
            NotFound: the session has no snapshot, or no snapshot of that name.
            SnapshotError: ``snapshot_corrupt`` when the manifest does not verify.
            InfrastructureError: ``store_unavailable``.
        """
        keys.check_id("tenant", tenant)
        keys.check_id("session_id", session_id)
        if isinstance(ref, SnapshotRef):
            if (ref.tenant, ref.session_id) != (tenant, session_id):
                raise InvalidInput(
                    "the snapshot ref belongs to another tenant or session",
                    operation="snapshot.restore",
                    context={"field": "ref"},
                )
            return self._load(tenant, session_id, keys.check_snapshot_name(ref.name))
        if ref is not None:
            return self._load(tenant, session_id, keys.check_snapshot_name(ref))
        history = self._read_pointer(tenant, session_id)
        if not history:
            raise NotFound(
                f"session {session_id} has no snapshot",
                operation="snapshot.restore",
                context={"session": session_id},
            )
        return self._load(tenant, session_id, history[-1][0], via_pointer=True)

    def _load(
        self, tenant: str, session_id: str, name: str, *, via_pointer: bool = False
    ) -> Manifest:
        try:
            stored = self._get(keys.manifest_key(tenant, session_id, name))
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
                return self._load(tenant, session_id, base)
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

    def restore_plan(
        self,
        manifest: Manifest,
        *,
        max_tar_bytes: int = MAX_TAR_BYTES,
        large_file_bytes: int | None = None,
        stream_bytes: int = transfer.STREAM_RESTORE_BYTES,
    ) -> Generator[RestorePlan, None, None]:
        """The restore of ``manifest`` in parts (tars to unpack, files over
        ``large_file_bytes`` to write apart), each fetched and verified before it
        is yielded; nothing is fetched until the first is asked for.

        Up to ``stream_bytes`` it is one part, yielded once every blob and file
        hashes to what the manifest says: a caller that unpacks only after this
        cannot half-restore because of bad data. Above, a part is one tar or one
        large file, so that memory stays bounded; a later part can then fail
        after earlier ones were unpacked (see ``transfer.restore_plan`` for why).

        Raises:
            SnapshotError: ``snapshot_corrupt`` for a missing blob or a hash mismatch.
            InfrastructureError: ``store_unavailable``.
        """
        return transfer.restore_plan(self, manifest, max_tar_bytes, large_file_bytes, stream_bytes)

    # ---- sessions -------------------------------------------------------------------

    def fork(self, tenant: str, src_session: str, dst_session: str) -> SnapshotRef:
        """Start ``dst_session`` from the latest snapshot of ``src_session``.

        The manifest is copied (with the new session's name on it); the blobs are
        shared, never copied: they are the tenant's, not the session's.

        Raises:
            InvalidInput: bad ids, the same session twice, or a destination
                that already has snapshots.
            NotFound: the source has no snapshot.
            SnapshotError: the source changed under the fork and its blobs could
                not be proven present (retryable).
        """
        return lifecycle.fork(self, tenant, src_session, dst_session)

    def gc(self, tenant: str, *, now: float | None = None) -> GcReport:
        """Delete the tenant's blobs that no retained manifest refers to.

        See ``lifecycle.collect`` for why this is safe while snapshots are taken.
        """
        self.settle()  # this process's retention first: no stray it is deleting
        return lifecycle.collect(self, tenant, time.time() if now is None else now)

    def latest(self, tenant: str, session_id: str) -> SnapshotRef | None:
        refs = self.snapshots(tenant, session_id)
        return refs[-1] if refs else None

    def snapshots(self, tenant: str, session_id: str) -> list[SnapshotRef]:
        """The session's retained snapshots, oldest first."""
        history = self._read_pointer(tenant, session_id)[-self.keep :]
        return [SnapshotRef(tenant, session_id, name, digest) for name, digest in history]

    def sessions(self, tenant: str) -> list[str]:
        """The tenant's sessions that have a snapshot pointer, sorted (collection
        finds the closed ones among them)."""
        found = (
            keys.parse_session_key(tenant, k) for k in self._list(keys.sessions_prefix(tenant))
        )
        return sorted({p[0] for p in found if p is not None and p[1] is None})

    def delete_session(self, tenant: str, session_id: str) -> int:
        """Forget a closed session's snapshots (its blobs are left to ``gc``).

        Returns:
            How many manifests were deleted.
        """
        self._delete(keys.pointer_key(tenant, session_id))
        names = self._list(keys.manifests_prefix(tenant, session_id))
        self._parallel(self._delete, names)
        return len(names)

    # ---- pointer and manifests ------------------------------------------------------

    def _read_pointer(self, tenant: str, session_id: str) -> list[tuple[str, str]]:
        """The session's retained snapshots ``(name, hash)``, oldest first."""
        return pointer.read(self, tenant, session_id).history

    def _write_manifest(self, manifest: Manifest) -> None:
        key = keys.manifest_key(manifest.tenant, manifest.session_id, manifest.name)
        self._put(key, encode(manifest.to_json()))

    def _advance_pointer(self, manifest: Manifest, before: pointer.Pointer) -> None:
        """Make ``manifest`` the latest, then delete, in the background, the
        manifests that fell out of retention (a stray left by a failure is gc's)."""
        for name in pointer.advance(self, manifest, before):
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
            self._delete(key)
        except InfrastructureError as exc:
            log.warning("retention could not delete %s: %s", key, exc)

    # ---- helpers --------------------------------------------------------------------

    def _parallel(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
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
