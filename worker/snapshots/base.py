"""The snapshot store: the algorithm lives here, backends fill in six primitives.

``SnapshotStore`` owns everything that must be the same on every backend:
tenant namespacing and id checks (``keys``), entry rules and limits
(``entries``), manifests (``manifest``), content addressing, packing and dedupe
(``blobs``, ``transfer``), parallel transfers, verification on restore,
retention, fork and garbage collection (``lifecycle``). A backend
implements ``_put``, ``_get``, ``_exists``, ``_mtime``, ``_list``, ``_delete``
over some object namespace, raising ``KeyError`` for a missing key and
``InfrastructureError`` (``store_unavailable``) when the store cannot be
reached: it must not keep a broken connection, so the next call can succeed.

A snapshot is two calls, so that the sandbox is asked only for what is missing
(see ``workspace.snapshot_sandbox``): ``prepare`` validates a scan, compares it
with the previous manifest (a turn that changed nothing stops there, without a
round trip) and lists the files whose content is not stored yet; ``commit``
takes their bytes, verifies them, uploads them in parallel, and writes the
manifest and then the session's pointer. Until the pointer names it, a
manifest is not a snapshot.

Retention: the pointer holds the last ``keep`` snapshot names; an older one is
deleted when it falls out. Its blobs are left to ``gc``; see there for why
collection is safe against snapshots in flight.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from scheduler.errors import ErrorCode, InfrastructureError, InvalidInput, NotFound, SnapshotError
from scheduler.settings import (
    DEFAULT_SNAPSHOT_GC_GRACE_S,
    DEFAULT_SNAPSHOT_KEEP,
    DEFAULT_SNAPSHOT_THREADS,
)
from worker.snapshots import delta, keys, lifecycle, transfer
from worker.snapshots.archive import MAX_TAR_BYTES, RestorePlan
from worker.snapshots.blobs import PACK_BYTES, SMALL_FILE_BYTES, KnownBlobs, decode, encode
from worker.snapshots.entries import (
    Entry,
    ManifestLimits,
    check_roots,
    entries_from_scan,
    scan_rows,
)
from worker.snapshots.manifest import Delta, Manifest, group_by_parent, group_hash, tree_hash
from worker.snapshots.refs import GcReport, SnapshotDraft, SnapshotRef, make_ref

__all__ = ["DEFAULT_ROOTS", "GcReport", "SnapshotDraft", "SnapshotRef", "SnapshotStore"]

DEFAULT_ROOTS = ("/workspace", "/home/sandbox")
"""What a snapshot holds (the same as ``worker.agent_api.SNAPSHOT_ROOTS``)."""
MAX_MANIFEST_BYTES = 256 << 20

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
        pointer = self._pool.submit(self._read_pointer_doc, tenant, session_id)  # meanwhile:
        if previous is not None:
            change = delta.diff(previous, rows, roots_t, self.limits)
        if change is None:
            entries = entries_from_scan(rows, roots_t, self.limits)
            groups = group_by_parent(entries)
            hashes = {d: group_hash(g) for d, g in groups.items()}
            digest = tree_hash(roots_t, hashes)
            known: dict[str, Any] = {"groups": groups, "hashes": hashes}
        else:
            entries, digest, known = change.entries, change.hash, change.known()
        if previous is not None and previous.hash == digest:
            return None
        history, bases = pointer.result()
        if previous is None and history:
            if history[-1][1] == digest:
                return None
            previous = self._load(tenant, session_id, history[-1][0], via_pointer=True)
            change = delta.diff(previous, rows, roots_t, self.limits)
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
            history=history,
            where={},
            blobs={},
            need={},
            started=started,
            known=known,
            previous=trusted,
            change=change if trusted else None,
            bases=bases,
        )
        transfer.classify(self, draft, trusted)
        return draft

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
        t0 = time.perf_counter()
        missing = [e.path for sha, e in draft.need.items() if sha not in contents]
        if missing:
            raise SnapshotError(
                f"commit lacks the bytes of {missing[:5]}", operation="snapshot", context={}
            )
        uploads = transfer.plan(self, draft)
        self._check_fresh(draft)
        where, blobs = transfer.referenced(draft)  # also fills draft.known
        stored = self._stored_as(draft)
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

        def put(job: tuple[str, list[Entry]] | None) -> None:
            if job is None:
                self._write_manifest(manifest)
            else:
                transfer.put_blob(self, draft.tenant, job[0], job[1], contents)

        self._parallel(put, [None, *uploads])  # the manifest is no snapshot before the pointer
        transfer.remember(self, draft, uploads)
        self._check_fresh(draft)
        self._advance_pointer(manifest, draft.history, draft.bases)
        stats = {
            "files": manifest.file_count,
            "stored_entries": len(manifest.entries) if stored is None else stored[1].size,
            "bytes": manifest.total_bytes,
            "uploaded_blobs": len(uploads),
            "uploaded_bytes": sum(draft.blobs[b] for b, _ in uploads),
            "commit_ms": (time.perf_counter() - t0) * 1000,
        }
        return make_ref(manifest, stats)

    def _check_fresh(self, draft: SnapshotDraft) -> None:
        """Refuse to write a manifest or pointer later than half the GC grace after
        the snapshot started (see ``lifecycle`` for why)."""
        if time.time() - draft.started > self.known.fresh_s:
            raise SnapshotError(
                "the snapshot took longer than half the GC grace period; take it again",
                operation="snapshot",
                retryable=True,
            )

    def _stored_as(self, draft: SnapshotDraft) -> tuple[str, Delta] | None:
        """``(base, difference)`` when the new manifest can be stored as a difference:
        it follows the pointer's latest, whose base the pointer still retains."""
        previous, change = draft.previous, draft.change
        if previous is None or change is None or draft.history[-1][0] != previous.name:
            return None
        if previous.base is not None and previous.base not in {n for n, _ in draft.history}:
            return None
        return delta.next_delta(previous, change)

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
                raise _corrupt(name, "the session's pointer names a missing manifest") from None
            raise NotFound(
                f"session {session_id} has no snapshot {name}",
                operation="snapshot.restore",
                context={"session": session_id, "snapshot": name},
            ) from None
        try:
            data = decode(stored, limit=MAX_MANIFEST_BYTES)
        except ValueError as exc:
            raise _corrupt(name, str(exc)) from None

        def load_base(base: str) -> Manifest:
            try:
                return self._load(tenant, session_id, base)
            except NotFound:
                raise _corrupt(name, f"its base {base} is missing") from None

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
    ) -> RestorePlan:
        """Fetch and verify every blob of ``manifest``, then plan the restore: the
        tar(s) to unpack, and the files over ``large_file_bytes`` to write apart.

        Nothing is returned unless every blob and every file hashes to what the
        manifest says: a caller that unpacks only after this cannot half-restore
        because of bad data.

        Raises:
            SnapshotError: ``snapshot_corrupt`` for a missing blob or a hash mismatch.
            InfrastructureError: ``store_unavailable``.
        """
        return transfer.restore_plan(self, manifest, max_tar_bytes, large_file_bytes)

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
        return self._read_pointer_doc(tenant, session_id)[0]

    def _read_pointer_doc(
        self, tenant: str, session_id: str
    ) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """The retained snapshots, and the base of each stored as a difference."""
        try:
            stored = self._get(keys.pointer_key(tenant, session_id))
        except KeyError:
            return [], {}
        try:
            doc = json.loads(bytes(decode(stored, limit=1 << 20)))
            history = [(keys.check_snapshot_name(n), str(h)) for n, h in doc["history"]]
            bases = {
                keys.check_snapshot_name(n): keys.check_snapshot_name(b)
                for n, b in doc.get("bases", {}).items()
            }
        except (ValueError, TypeError, KeyError, AttributeError, InvalidInput) as exc:
            raise _corrupt(session_id, f"unreadable pointer ({exc})") from None
        if not history:
            raise _corrupt(session_id, "empty pointer")
        return history, bases

    def _write_manifest(self, manifest: Manifest) -> None:
        key = keys.manifest_key(manifest.tenant, manifest.session_id, manifest.name)
        self._put(key, encode(manifest.to_json()))

    def _advance_pointer(
        self,
        manifest: Manifest,
        history: list[tuple[str, str]],
        bases: Mapping[str, str] | None = None,
    ) -> None:
        """Make ``manifest`` the latest, then delete what fell out of retention.

        The last ``keep`` snapshots are retained, and with them the full
        manifests that those stored as differences are based on.
        """
        full = [*history, (manifest.name, manifest.hash)]
        links = dict(bases or {})
        if manifest.base is not None:
            links[manifest.name] = manifest.base
        wanted = {name for name, _ in full[-self.keep :]}
        wanted |= {links[n] for n in wanted if n in links}
        kept = [h for h in full if h[0] in wanted]
        dropped = [h for h in full if h[0] not in wanted]
        doc = {
            "v": 2,
            "history": kept,
            "bases": {n: b for n, b in links.items() if n in wanted},
        }
        self._put(
            keys.pointer_key(manifest.tenant, manifest.session_id),
            encode(json.dumps(doc).encode()),
        )
        for name, _ in dropped:  # off the snapshot's path: a stray is gc's to remove
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


def _check_owner(manifest: Manifest, tenant: str, session_id: str) -> None:
    if (manifest.tenant, manifest.session_id) != (tenant, session_id):
        raise InvalidInput(
            "the previous manifest belongs to another tenant or session",
            operation="snapshot",
            context={"field": "previous"},
        )


def _corrupt(what: str, why: str) -> SnapshotError:
    return SnapshotError(
        f"snapshot {what} is refused: {why}",
        code=ErrorCode.SNAPSHOT_CORRUPT,
        operation="snapshot.restore",
        context={"snapshot": what},
    )
