"""Memory images in the object store: chunked, content-addressed, verified, tenant-scoped.

A memory image is what ``Runtime.checkpoint`` wrote (gVisor: the kernel's
state, the processes, their pages, the in-memory filesystems). Its files are
stored as chunks shared by the tenant's images (``worker.snapshots.memchunks``:
a fork stores its pages once, a second pause only what changed) and a small
manifest: the record of whose it is (``MemoryMeta``: tenant, session, the
workspace snapshot it was taken with, the sandbox type) and each file's
chunks, stored under ``t/<tenant>/mem/<session>/<sha256 of the manifest>``
(``sandgrid.wire.objects.keys``). ``fetch`` checks the manifest's hash, that
its record names the same tenant, session and snapshot as the session that
asks (an image is never restored for another tenant, another session or a
workspace that moved on since: ``MemoryRefused`` says which), then each
chunk's hash and length. ``clone`` gives another session of the tenant (a
fork, a checkpoint's restore) its own manifest over the same chunks.
docs/memory.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sandgrid.errors import SnapshotError
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore
from worker.snapshots.memchunks import (
    CHUNK_BYTES,
    Chunk,
    ChunkRefused,
    ChunkSource,
    fetch_chunks,
    put_chunks,
)
from worker.snapshots.memshare import SharedFiles

__all__ = [
    "SWEEP_GRACE_S",
    "MemoryMeta",
    "MemoryRefused",
    "MemoryStore",
    "StoredImage",
    "check_meta",
]

SWEEP_GRACE_S = 600.0
"""A chunk younger than this is never swept: a pause may have stored it and not yet
its manifest."""
_FORMAT = 2


class MemoryRefused(SnapshotError):
    """A memory image that must not be restored here (corrupt, another owner, stale)."""


@dataclass(frozen=True)
class MemoryMeta:
    """Whose an image is, checked before it is restored."""

    tenant: str
    session: str
    snapshot: str | None
    sandbox_type: str
    runtime: str
    lineage: tuple[str, ...] = ()
    """The containers the processes ran in, the last one checkpointed (not checked:
    the restored sandbox answers for them, ``Sandbox.lineage``)."""


@dataclass(frozen=True)
class StoredImage:
    """One image as stored: its name (the manifest's sha256) and its sizes."""

    sha256: str
    stored_bytes: int
    raw_bytes: int
    new_bytes: int = 0
    """Stored bytes this put uploaded: the rest were the tenant's chunks already."""


class MemoryStore:
    """Memory images of sessions over an ``ObjectStore``.

    Args:
        objects: the snapshot store's objects (``SnapshotStore.objects``).
        max_bytes: the largest checkpoint (unpacked) it takes or restores.
    """

    def __init__(
        self,
        objects: ObjectStore,
        *,
        max_bytes: int,
        cache: ChunkSource | None = None,
        share: SharedFiles | None = None,
    ) -> None:
        self.objects = objects
        self.max_bytes = max_bytes
        self.cache = cache
        """The node's unpacked chunks (``worker.snapshots.memcache``), or none."""
        self.share = share
        """The files the node's restores assemble (``worker.snapshots.memshare``), or none."""

    def put(self, image_dir: Path, meta: MemoryMeta) -> StoredImage:
        """Store ``image_dir`` as ``meta``'s image; its name and sizes (``put_many``)."""
        return self.put_many(image_dir, [meta])[0]

    def put_many(self, image_dir: Path, metas: list[MemoryMeta]) -> list[StoredImage]:
        """Store ``image_dir``'s chunks once and one manifest per record of ``metas``
        (all of one tenant: a fork's sessions).

        Raises:
            SnapshotError: the image is larger than ``max_bytes``, or the store failed.
        """
        files = sorted(p for p in image_dir.iterdir() if p.is_file())
        raw = sum(p.stat().st_size for p in files)
        if raw > self.max_bytes:
            raise SnapshotError(
                f"memory image of {raw >> 20} MiB is larger than the limit of "
                f"{self.max_bytes >> 20} MiB (SANDGRID_WORKER__MEMORY__MAX_IMAGE_MB)",
                operation="pause",
                context={"bytes": raw, "limit": self.max_bytes},
            )
        # A fork's copies restore its pages, some on this node: its files are offered
        # to them as they are (``SharedFiles.offer``), else its chunks kept in the
        # node's cache (24.4).
        forks = len(metas) > 1
        share = self.share if forks and self.share and self.share.root is not None else None
        seed = self.cache if forks and share is None else None
        chunks, new = put_chunks(self.objects, metas[0].tenant, files, seed)
        if share is not None:
            share.offer(metas[0].tenant, chunks, image_dir)
        return [self._manifest(meta, chunks, new if i == 0 else 0) for i, meta in enumerate(metas)]

    def _manifest(self, meta: MemoryMeta, chunks: dict[str, list[Chunk]], new: int) -> StoredImage:
        body: dict[str, Any] = {
            "format": _FORMAT,
            "meta": asdict(meta),
            "files": {n: [[c.sha256, c.stored, c.raw] for c in cs] for n, cs in chunks.items()},
        }
        data = json.dumps(body, sort_keys=True).encode()
        sha = hashlib.sha256(data).hexdigest()
        self.objects.put_addressed(keys.memory_image_key(meta.tenant, meta.session, sha), data)
        every = [c for cs in chunks.values() for c in cs]
        return StoredImage(
            sha256=sha,
            stored_bytes=sum(c.stored for c in every) + len(data),
            raw_bytes=sum(c.raw for c in every),
            new_bytes=new + len(data),
        )

    def fetch(self, want: MemoryMeta, sha256: str, dest: Path) -> MemoryMeta:
        """Verify image ``sha256`` of ``want``'s session and unpack it into ``dest``
        (``fetch_counted`` without the count)."""
        return self.fetch_counted(want, sha256, dest)[0]

    def fetch_counted(self, want: MemoryMeta, sha256: str, dest: Path) -> tuple[MemoryMeta, int]:
        """Verify image ``sha256`` of ``want``'s session and unpack it into ``dest``;
        its record and how many of its chunks came from the store (the others from
        the node's cache).

        Raises:
            MemoryRefused: no such image of this tenant's session, the manifest or
                a chunk does not hash to its name, the manifest is not ours, or
                its record names another tenant, session, snapshot or type.
            SnapshotError: the store failed.
        """
        meta, files = self._read(want, sha256)
        try:
            fetched = fetch_chunks(self.objects, want.tenant, dest, files, self.cache, self.share)
        except (ChunkRefused, OSError, ValueError) as exc:
            raise MemoryRefused(
                f"memory image {sha256[:12]} fails verification ({exc})",
                operation="resume",
                context={"image": sha256},
            ) from exc
        return meta, fetched

    def clone(self, want: MemoryMeta, sha256: str, to: MemoryMeta) -> StoredImage:
        """A manifest of ``to``'s session (same tenant) over image ``sha256``'s chunks:
        a fork of a paused session, the restore of a checkpoint. Nothing is copied.

        Raises:
            MemoryRefused: as ``fetch`` (the source image is verified first).
        """
        meta, files = self._read(want, sha256)
        if to.tenant != want.tenant:
            raise MemoryRefused("a memory image is never cloned for another tenant")
        return self._manifest(replace(to, lineage=meta.lineage), files, 0)

    def _read(self, want: MemoryMeta, sha256: str) -> tuple[MemoryMeta, dict[str, list[Chunk]]]:
        def refused(why: str) -> MemoryRefused:
            return MemoryRefused(
                f"memory image {sha256[:12]} {why}", operation="resume", context={"image": sha256}
            )

        try:
            data = self.objects.get(keys.memory_image_key(want.tenant, want.session, sha256))
        except KeyError:
            raise refused("is not in the store") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise refused("fails verification (its bytes changed in the store)")
        try:
            meta, files = _parse(data, self.max_bytes)
        except (ValueError, KeyError, TypeError) as exc:
            raise refused(f"cannot be read: {exc}") from exc
        check_meta(meta, want, sha256)
        return meta, files

    def discard(self, tenant: str, session_id: str, sha256: str) -> None:
        """Delete one image's manifest once it was used (restored or refused): it is
        never used twice. A store that fails here leaves garbage, never a wrong
        restore (the record no longer names it); ``drop`` collects it when the
        session goes, ``sweep`` the chunks no manifest names."""
        with contextlib.suppress(SnapshotError):
            self.objects.delete(keys.memory_image_key(tenant, session_id, sha256))

    def drop(self, tenant: str, session_id: str) -> int:
        """Delete every memory image and memory checkpoint of a session (closed,
        forgotten), then the tenant's chunks no image names any more; how many images."""
        found = self.objects.list(keys.memory_prefix(tenant, session_id))
        found += self.objects.list(keys.memory_checkpoints_prefix(tenant, session_id))
        for key in found:
            self.objects.delete(key)
        self.sweep(tenant)
        return len(found)

    def sweep(self, tenant: str, *, now: float | None = None) -> int:
        """Delete the tenant's chunks that no manifest names and that are older than
        ``SWEEP_GRACE_S``; how many. A chunk another pause counted on (it found it
        present a moment before) and this deleted makes that image fail
        verification at its restore: the session falls back to its workspace."""
        now = time.time() if now is None else now
        named: set[str] = set()
        for key in self.objects.list(keys.memory_images_prefix(tenant)):
            with contextlib.suppress(KeyError, ValueError, TypeError):
                named.update(
                    c.sha256
                    for cs in _parse(self.objects.get(key), 1 << 62)[1].values()
                    for c in cs
                )
        swept = 0
        for key in self.objects.list(keys.memory_chunks_prefix(tenant)):
            if key.rsplit("/", 1)[-1] in named:
                continue
            born = self.objects.mtime(key)
            if born is not None and now - born < SWEEP_GRACE_S:
                continue
            with contextlib.suppress(SnapshotError):
                self.objects.delete(key)
                swept += 1
        return swept


def _parse(data: bytes, max_bytes: int) -> tuple[MemoryMeta, dict[str, list[Chunk]]]:
    """The record and the chunks of a manifest: plain file names only (runsc writes
    no other, so nothing can be written outside the scratch directory), chunks
    at most ``CHUNK_BYTES`` each, the whole at most ``max_bytes`` unpacked."""
    body = json.loads(data)
    if body.get("format") != _FORMAT:
        raise ValueError(f"format {body.get('format')!r}")
    fields = body["meta"]
    meta = MemoryMeta(**{**fields, "lineage": tuple(fields.get("lineage", ()))})
    files: dict[str, list[Chunk]] = {}
    for name, rows in body["files"].items():
        if not isinstance(name, str) or "/" in name or name.startswith(".") or not name:
            raise ValueError(f"unexpected file {name!r}")
        files[name] = [Chunk(str(sha), int(stored), int(raw)) for sha, stored, raw in rows]
        if any(not 0 < c.raw <= CHUNK_BYTES for c in files[name]):
            raise ValueError(f"a chunk of {name!r} is larger than {CHUNK_BYTES} bytes")
    total = sum(c.raw for cs in files.values() for c in cs)
    if total > max_bytes:
        raise ValueError(f"{total >> 20} MiB unpacked is larger than the limit")
    return meta, files


def check_meta(meta: MemoryMeta, want: MemoryMeta, sha256: str) -> None:
    """Refuse an image whose record names another tenant, session, snapshot, type or
    runtime than the session that asks (``MemoryRefused`` names the field)."""
    for field in ("tenant", "session", "snapshot", "sandbox_type", "runtime"):
        if getattr(meta, field) != getattr(want, field):
            raise MemoryRefused(
                f"memory image {sha256[:12]} belongs to another {field} "
                f"({getattr(meta, field)!r}, not {getattr(want, field)!r})",
                operation="resume",
                context={"image": sha256, "field": field},
            )
