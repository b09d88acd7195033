"""Memory images in the object store: packed, content-addressed, verified, tenant-scoped.

A memory image is what ``Runtime.checkpoint`` wrote (gVisor: the kernel's
state, the processes, their pages, the in-memory filesystems), packed here as
one tar (zstd; gzip where the host has no zstd) with a small record of whose
it is (``MemoryMeta``: tenant, session, the workspace snapshot it was taken
with, the sandbox type), and
stored under ``t/<tenant>/mem/<session>/<sha256>`` (``sandgrid.wire.objects.keys``),
named by the hash of its stored bytes. ``fetch`` checks that hash, then that the
record names the same tenant, session and snapshot as the session that asks:
an image is never restored for another tenant, another session or a workspace
that moved on since (``MemoryRefused`` says which). docs/memory.md.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

from sandgrid.errors import SnapshotError
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore

__all__ = [
    "META_NAME",
    "MemoryMeta",
    "MemoryRefused",
    "MemoryStore",
    "StoredImage",
    "compress",
    "decompress",
]

META_NAME = "sandgrid-memory.json"
"""The record's name inside the tar (never a name runsc writes)."""
_ZSTD = shutil.which("zstd")
"""zstd (level 1, every core) packs a checkpoint's pages about ten times faster
than gzip at a similar ratio; without the binary, gzip's fastest level."""
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compress(data: bytes) -> bytes:
    """``data`` compressed: zstd when the host has it, else gzip -1 (``decompress``
    tells them apart by their magic bytes)."""
    if _ZSTD is None:
        return gzip.compress(data, compresslevel=1)
    return subprocess.run(
        [_ZSTD, "-1", "-T0", "-q", "-c"], input=data, capture_output=True, check=True
    ).stdout


def decompress(data: bytes) -> bytes:
    """The bytes ``compress`` packed (either format).

    Raises:
        ValueError: neither format, or zstd refused them.
    """
    if data.startswith(_ZSTD_MAGIC):
        if _ZSTD is None:
            raise ValueError("a zstd image on a host without zstd")
        done = subprocess.run([_ZSTD, "-d", "-q", "-c"], input=data, capture_output=True)
        if done.returncode != 0:
            raise ValueError(f"zstd: {done.stderr.decode(errors='replace').strip()}")
        return done.stdout
    return gzip.decompress(data)


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
    """One image as stored: its name (sha256) and its sizes."""

    sha256: str
    stored_bytes: int
    raw_bytes: int


class MemoryStore:
    """Memory images of sessions over an ``ObjectStore``.

    Args:
        objects: the snapshot store's objects (``SnapshotStore.objects``).
        max_bytes: the largest checkpoint (unpacked) it takes.
    """

    def __init__(self, objects: ObjectStore, *, max_bytes: int) -> None:
        self.objects = objects
        self.max_bytes = max_bytes

    def put(self, image_dir: Path, meta: MemoryMeta) -> StoredImage:
        """Pack ``image_dir`` with ``meta`` and store it; its name and sizes.

        Raises:
            SnapshotError: the image is larger than ``max_bytes``.
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
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            record = json.dumps(asdict(meta), sort_keys=True).encode()
            info = tarfile.TarInfo(META_NAME)
            info.size = len(record)
            tar.addfile(info, io.BytesIO(record))
            for path in files:
                tar.add(path, arcname=path.name, recursive=False)
        data = compress(buf.getvalue())
        sha = hashlib.sha256(data).hexdigest()
        self.objects.put(keys.memory_image_key(meta.tenant, meta.session, sha), data)
        return StoredImage(sha256=sha, stored_bytes=len(data), raw_bytes=raw)

    def fetch(self, want: MemoryMeta, sha256: str, dest: Path) -> MemoryMeta:
        """Verify image ``sha256`` of ``want``'s session and unpack it into ``dest``.

        Raises:
            MemoryRefused: no such image of this tenant's session, the bytes do
                not hash to their name, the tar is not ours, or its record names
                another tenant, session, snapshot or type.
            SnapshotError: the store failed.
        """
        try:
            data = self.objects.get(keys.memory_image_key(want.tenant, want.session, sha256))
        except KeyError:
            raise MemoryRefused(
                f"memory image {sha256[:12]} is not in the store",
                operation="resume",
                context={"image": sha256},
            ) from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise MemoryRefused(
                f"memory image {sha256[:12]} fails verification (its bytes changed in the store)",
                operation="resume",
                context={"image": sha256},
            )
        try:
            with tarfile.open(fileobj=io.BytesIO(decompress(data)), mode="r") as tar:
                meta = _meta(tar)
                _check(meta, want, sha256)
                _unpack(tar, dest)
        except (tarfile.TarError, OSError, ValueError, KeyError, TypeError, EOFError) as exc:
            raise MemoryRefused(
                f"memory image {sha256[:12]} cannot be read: {exc}",
                operation="resume",
                context={"image": sha256},
            ) from exc
        return meta

    def discard(self, tenant: str, session_id: str, sha256: str) -> None:
        """Delete one image once it was used (restored or refused): it is never used twice.
        A store that fails here leaves garbage, never a wrong restore (the record no
        longer names it); ``drop`` collects it when the session goes."""
        with contextlib.suppress(SnapshotError):
            self.objects.delete(keys.memory_image_key(tenant, session_id, sha256))

    def drop(self, tenant: str, session_id: str) -> int:
        """Delete every memory image of a session (closed, forgotten); how many."""
        found = self.objects.list(keys.memory_prefix(tenant, session_id))
        for key in found:
            self.objects.delete(key)
        return len(found)


def _meta(tar: tarfile.TarFile) -> MemoryMeta:
    member = tar.extractfile(META_NAME)
    if member is None:
        raise KeyError(META_NAME)
    fields = json.loads(member.read())
    return MemoryMeta(**{**fields, "lineage": tuple(fields.get("lineage", ()))})


def _unpack(tar: tarfile.TarFile, dest: Path) -> None:
    """The image's files into ``dest``: plain files with plain names only (runsc writes
    no other), so nothing in a tar can write outside ``dest``."""
    for member in tar.getmembers():
        if member.name == META_NAME:
            continue
        if not member.isfile() or "/" in member.name or member.name.startswith("."):
            raise ValueError(f"unexpected member {member.name!r}")
        source = tar.extractfile(member)
        if source is None:
            raise ValueError(f"unreadable member {member.name!r}")
        with (dest / member.name).open("wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)


def _check(meta: MemoryMeta, want: MemoryMeta, sha256: str) -> None:
    for field in ("tenant", "session", "snapshot", "sandbox_type", "runtime"):
        if getattr(meta, field) != getattr(want, field):
            raise MemoryRefused(
                f"memory image {sha256[:12]} belongs to another {field} "
                f"({getattr(meta, field)!r}, not {getattr(want, field)!r})",
                operation="resume",
                context={"image": sha256, "field": field},
            )
