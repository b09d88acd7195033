"""The chunks of memory images: pieces cut by content, zstd'd, content-addressed, in parallel.

A checkpoint's files are cut into pieces of at most ``CHUNK_BYTES``; each is
compressed on its own and stored once per tenant at ``t/<tenant>/memchunk/<sha256
of the stored bytes>``. Why chunks and not one packed image (issue 24.2, 24.4):

- a fork of N sessions stores the pages once and N small manifests;
- a second pause of the same session uploads only the pieces that changed;
- pack, upload, download and unpack run on every core, piece by piece, instead
  of one ``zstd`` over a whole image held in memory.

Where a piece ends is decided by the pages' content, not by its offset
(``cut_points``): a page whose CRC ends in ``CUT_BITS`` zero bits ends a piece
(between ``MIN_CHUNK_BYTES`` and ``CHUNK_BYTES``). gVisor writes the pages of a
re-checkpointed sandbox mostly in the same runs but shifted (by a few pages
after a restore: measured, 94% of a second image's pages were the first's, in
runs moved by 12 KiB to 110 KiB), which fixed offsets never matched and
boundaries set by content do, for every run longer than a piece.

Each piece is verified on the way back (its bytes hash to its name, it unpacks
to the length the manifest says, at most ``CHUNK_BYTES``), so a chunk changed
or lost in the store is refused, never restored.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import mmap
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import zstandard

from sandgrid.errors import SnapshotError
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore

if TYPE_CHECKING:
    from worker.snapshots.memshare import SharedFiles

__all__ = [
    "CHUNK_BYTES",
    "CUT_BITS",
    "MIN_CHUNK_BYTES",
    "PAGE_BYTES",
    "Chunk",
    "ChunkRefused",
    "ChunkSource",
    "compress",
    "cut_points",
    "decompress",
    "fetch_chunks",
    "parallel",
    "put_chunks",
]

CHUNK_BYTES = 8 << 20
"""The longest piece, 8 MiB: the limit a manifest's chunk is checked against."""
PAGE_BYTES = 4096
"""Pieces end on page boundaries (gVisor's pages file is made of whole pages)."""
MIN_CHUNK_BYTES = 1 << 20
CUT_BITS = 10
"""A page whose CRC-32 ends in this many zero bits ends a piece: 4 MiB on average,
a 200 MB image ~45 pieces, every core busy, a changed page costs ~4 MiB."""
_THREADS = max(2, min(8, (os.cpu_count() or 2) * 2))
"""zstd and the store's sockets release the GIL: a few more threads than cores keeps both busy."""
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
T = TypeVar("T")
R = TypeVar("R")


class ChunkSource(Protocol):
    """Where a restore may find a chunk before the store (``memcache.ChunkCache``)."""

    def get(self, tenant: str, chunk: Chunk, fetch: Callable[[], bytes]) -> bytes:
        """``chunk``'s unpacked bytes, from ``fetch`` when not held (and verified)."""
        ...

    def keep(self, tenant: str, chunk: Chunk, raw: bytes) -> None:
        """Hold ``raw``, which this node packed as ``chunk`` itself."""
        ...


class ChunkRefused(ValueError):
    """A chunk that is missing, changed or not what its manifest says."""


class Chunk(NamedTuple):
    """One stored piece of an image file, in the file's order."""

    sha256: str
    """The name: the hash of the stored (compressed) bytes."""
    stored: int
    raw: int
    """Its length unpacked (at most ``CHUNK_BYTES``): where the next piece starts."""


def compress(data: bytes) -> bytes:
    """``data`` compressed with zstd -1 in this process (``zstandard``, the worker
    extra's: it releases the GIL, so the chunks of an image pack on every core; zstd -1
    packs pages about ten times faster than gzip at a similar ratio)."""
    return zstandard.ZstdCompressor(level=1).compress(data)


def decompress(data: bytes, limit: int = CHUNK_BYTES) -> bytes:
    """The bytes ``compress`` packed, at most ``limit`` of them; gzip too (the chunks of
    nodes that had no zstd before 24.4), told apart by their magic bytes.

    In this process: a process and two pipes per chunk cost more than unpacking
    it (0.6 s of a 0.8 s fetch of a 170 MiB image, 24.4).

    Raises:
        ValueError: neither format, zstd refused them, or they unpack past ``limit``.
    """
    if not data.startswith(_ZSTD_MAGIC):
        return gzip.decompress(data)
    return _unzstd(data, limit)


def _unzstd(data: bytes, limit: int) -> bytes:
    """One zstd frame unpacked in this process, refused past ``limit`` bytes (the
    frame's own header may claim any size: it is checked before anything is made)."""
    try:
        claimed = zstandard.frame_content_size(data)
        if claimed > limit:
            raise ValueError(f"zstd: a frame of {claimed} bytes, more than {limit}")
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd: {exc}") from exc


def parallel(work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``work`` of each item on the module's threads, in order; the first error is raised."""
    with ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="memchunk") as pool:
        return list(pool.map(work, items))


def cut_points(data: bytes | mmap.mmap) -> Iterator[tuple[int, int]]:
    """Where ``data`` is cut into pieces, as (start, length), in order: each ends on a
    page whose CRC-32 ends in ``CUT_BITS`` zero bits, once at least
    ``MIN_CHUNK_BYTES`` long, or at ``CHUNK_BYTES``, or at the end (pure; the same
    pages give the same pieces wherever they sit)."""
    size, mask = len(data), (1 << CUT_BITS) - 1
    start = 0
    with memoryview(data) as view:
        for end in range(PAGE_BYTES, size, PAGE_BYTES):
            length = end - start
            if length >= CHUNK_BYTES or (
                length >= MIN_CHUNK_BYTES and not zlib.crc32(view[end - PAGE_BYTES : end]) & mask
            ):
                yield start, length
                start = end
    if start < size:
        yield start, size - start


def _pieces(files: list[Path]) -> Iterator[tuple[Path, int, int]]:
    """The pieces of ``files`` as they are cut (the pool compresses the first ones
    while the rest are cut)."""
    for path in files:
        if path.stat().st_size == 0:
            continue
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            for at, length in cut_points(m):
                yield path, at, length


def put_chunks(
    objects: ObjectStore, tenant: str, files: list[Path], cache: ChunkSource | None = None
) -> tuple[dict[str, list[Chunk]], int]:
    """Store the pieces of ``files`` that the tenant's store lacks.

    Args:
        cache: the node's unpacked chunks, given each piece as well (a fork's source:
            the forks this node restores then fetch none of them).

    Returns:
        Per file name its chunks in order, and how many stored bytes were new
        (the rest was there already: an earlier pause, the fork's source).
    """

    def one(piece: tuple[Path, int, int]) -> tuple[str, Chunk, int]:
        path, at, length = piece
        with path.open("rb") as f:
            f.seek(at)
            raw = f.read(length)
        data = compress(raw)
        sha = hashlib.sha256(data).hexdigest()
        key = keys.memory_chunk_key(tenant, sha)
        new = 0
        if not objects.exists(key):
            objects.put_addressed(key, data)
            new = len(data)
        chunk = Chunk(sha, len(data), len(raw))
        if cache is not None:
            cache.keep(tenant, chunk, raw)
        return path.name, chunk, new

    done = parallel(one, _pieces(files))
    chunks: dict[str, list[Chunk]] = {path.name: [] for path in files}
    for name, chunk, _ in done:  # in the pieces' order
        chunks[name].append(chunk)
    return chunks, sum(new for _, _, new in done)


def fetch_chunks(
    objects: ObjectStore,
    tenant: str,
    dest: Path,
    files: dict[str, list[Chunk]],
    cache: ChunkSource | None = None,
    share: SharedFiles | None = None,
) -> int:
    """Write each file of ``files`` into ``dest`` from its verified chunks, in parallel.

    Args:
        cache: the node's unpacked chunks (``worker.snapshots.memcache``): a chunk
            it holds, verified, is not fetched again.
        share: the files the node's other restores assemble
            (``worker.snapshots.memshare``): a file another restore made of the same
            chunks is hard-linked from its copy, not written again.

    Returns:
        How many chunks came from the store (the rest from ``cache``).

    Raises:
        ChunkRefused: a chunk is missing, does not hash to its name, or does not
            unpack to the length its manifest gives.
        SnapshotError: the store failed.
    """
    fetched: list[Chunk] = []
    claims = {n: share.claim(tenant, n, cs) if share else (True, None) for n, cs in files.items()}
    mine = {n: cs for n, cs in files.items() if claims[n][0]}
    ok = False
    try:  # its own files first, so no restore waits on another that waits on it
        _write(objects, tenant, dest, mine, cache, fetched)
        ok = True
    finally:
        for name in mine:
            ticket = claims[name][1]
            if ticket is not None:
                ticket.finish(dest / name if ok else None)
    for name, (owned, ticket) in claims.items():
        if not owned and ticket is not None and not ticket.link(dest / name):
            _write(objects, tenant, dest, {name: files[name]}, cache, fetched)
    return len(fetched)


def _write(
    objects: ObjectStore,
    tenant: str,
    dest: Path,
    files: dict[str, list[Chunk]],
    cache: ChunkSource | None,
    fetched: list[Chunk],
) -> None:
    """``files`` written into ``dest`` piece by piece, on the module's threads; the
    chunks taken from the store are added to ``fetched``."""
    work: list[tuple[Path, int, Chunk]] = []
    for name, chunks in files.items():
        path = dest / name
        with path.open("wb") as f:
            f.truncate(sum(c.raw for c in chunks))
        at = 0
        for chunk in chunks:
            work.append((path, at, chunk))
            at += chunk.raw

    def from_store(chunk: Chunk) -> bytes:
        fetched.append(chunk)  # list.append is atomic: the threads share it
        return _fetch_one(objects, tenant, chunk)

    def one(item: tuple[Path, int, Chunk]) -> None:
        path, at, chunk = item
        if cache is None:
            raw = from_store(chunk)
        else:
            raw = cache.get(tenant, chunk, lambda: from_store(chunk))
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, raw, at)
        finally:
            os.close(fd)

    parallel(one, work)


def _fetch_one(objects: ObjectStore, tenant: str, chunk: Chunk) -> bytes:
    """One chunk's unpacked bytes from the store, verified against its name and length."""
    try:
        data = objects.get(keys.memory_chunk_key(tenant, chunk.sha256))
    except KeyError:
        raise ChunkRefused(f"chunk {chunk.sha256[:12]} is not in the store") from None
    if hashlib.sha256(data).hexdigest() != chunk.sha256:
        # A chunk is named by its bytes, so these are never any image's: delete them,
        # or the next pause that holds the same pages would count on them again.
        with contextlib.suppress(SnapshotError):
            objects.delete(keys.memory_chunk_key(tenant, chunk.sha256))
        raise ChunkRefused(f"chunk {chunk.sha256[:12]} fails verification")
    raw = decompress(data, chunk.raw)
    if len(raw) != chunk.raw:
        raise ChunkRefused(f"chunk {chunk.sha256[:12]} unpacks to {len(raw)} bytes")
    return raw
