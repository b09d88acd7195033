"""The snapshot store: the algorithm, once, over an object store.

``SnapshotStore`` owns everything that must be the same on every storage:
tenant namespacing and id checks (``sandgrid.wire.objects.keys``), entry rules and limits
(``format.entries``), manifests (``format.manifest``), content addressing,
packing and dedupe (``format.blobs``, ``transfer``), incremental snapshots
(``format.delta``, ``saving``), parallel transfers, verification on restore,
the session pointer and retention (``pointer``, ``catalog``), fork and
garbage collection (``lifecycle``). The bytes go to the ``ObjectStore`` it is
given (``objects.local``, ``objects.minio``), through public methods only.

A snapshot is two calls, so that the sandbox is asked only for what is missing
(see ``sync.snapshot_sandbox``): ``prepare`` validates a scan, compares it
with the previous manifest (a turn that changed nothing stops there, without a
round trip; one that changed a little costs about what it changed) and lists
the files whose content is not stored yet; ``commit`` takes their bytes,
verifies them, uploads them and the manifest in parallel, then writes the
session's pointer. Until the pointer names it, a manifest is not a snapshot.
A small snapshot skips the first round trip: the pointer carries its manifest
and new blobs, stored on their own after the turn's answer (see ``pointer``).

Retention: the pointer holds the last ``keep`` snapshot names (and the full
manifests those stored as differences need); an older one is deleted when it
falls out. Its blobs are left to ``gc``; see there for why collection is safe
against snapshots in flight.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from sandgrid.errors import InvalidInput, NotFound
from sandgrid.wire.objects import keys
from worker.agent.limits import ROOTS
from worker.snapshots import lifecycle, saving, transfer
from worker.snapshots.catalog import Catalog
from worker.snapshots.format.manifest import Manifest
from worker.snapshots.format.restoretars import MAX_TAR_BYTES, RestorePlan
from worker.snapshots.refs import GcReport, SnapshotDraft, SnapshotRef

__all__ = ["DEFAULT_ROOTS", "SnapshotStore"]

DEFAULT_ROOTS = ROOTS
"""What a snapshot holds: the agent's roots (``worker.agent.limits.ROOTS``)."""


class SnapshotStore(Catalog):
    """Snapshots of session workspaces, per tenant, in an ``ObjectStore``.

    Args:
        objects: where the bytes live (``LocalObjects``, ``MinioObjects``...).
        **options: ``Catalog``'s: keep, gc_grace_s, limits, threads,
            small_file_bytes, pack_bytes.
    """

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
        self.forget_pointer(tenant, session_id)  # a restore: the next snapshot reads it afresh
        if isinstance(ref, SnapshotRef):
            if (ref.tenant, ref.session_id) != (tenant, session_id):
                raise InvalidInput(
                    "the snapshot ref belongs to another tenant or session",
                    operation="snapshot.restore",
                    context={"field": "ref"},
                )
            return self.read_manifest(tenant, session_id, keys.check_snapshot_name(ref.name))
        if ref is not None:
            return self.read_manifest(tenant, session_id, keys.check_snapshot_name(ref))
        latest = self.read_latest(tenant, session_id)
        if latest is None:
            raise NotFound(
                f"session {session_id} has no snapshot",
                operation="snapshot.restore",
                context={"session": session_id},
            )
        return latest

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
        history = self.read_pointer(tenant, session_id)[-self.keep :]
        return [SnapshotRef(tenant, session_id, name, digest) for name, digest in history]

    def sessions(self, tenant: str) -> list[str]:
        """The tenant's sessions that have a snapshot pointer, sorted (collection
        finds the closed ones among them)."""
        found = (
            keys.parse_session_key(tenant, k)
            for k in self.objects.list(keys.sessions_prefix(tenant))
        )
        return sorted({p[0] for p in found if p is not None and p[1] is None})
