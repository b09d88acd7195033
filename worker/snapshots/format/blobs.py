"""Blobs: how bytes are stored and how files are grouped into them.

A blob is the concatenation of the contents of one or more files: a large file
is a blob of its own, stored under its sha256 (so the same file in two sessions
of a tenant is stored once), small files travel in packs of up to
``PACK_BYTES`` (one request for many files: a 10,000-file workspace is a few
objects, not 10,000), named by ``pack_name``. A pack of one file is the file's
own blob.

Stored form: one tag byte, then the payload: ``Z`` zlib level 1, or ``R`` raw
when a sample (three 4 KiB slices: the start, the middle and the end) does not
compress (random or already compressed data costs no CPU then). ``decode``
never inflates past the size the manifest announces.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable

from worker.snapshots.format.entries import Entry

__all__ = [
    "PACK_BYTES",
    "SMALL_FILE_BYTES",
    "decode",
    "encode",
    "group_files",
    "pack_name",
]

SMALL_FILE_BYTES = 256 << 10
"""Files below this size go into packs; larger ones are blobs of their own."""
PACK_BYTES = 8 << 20
"""Target size of a pack: large enough to amortise a request, small enough to
keep a few in flight per thread."""
_SLICE = 4 << 10
_INFLATE_CHUNK = 4 << 20
_RAW, _ZLIB = b"R", b"Z"


def encode(data: bytes | memoryview) -> bytes:
    """The stored form of ``data``: zlib level 1, or raw if a sample does not compress."""
    n = len(data)
    if n >= 3 * _SLICE:
        mid = n // 2 - _SLICE // 2
        sample = b"".join((data[:_SLICE], data[mid : mid + _SLICE], data[n - _SLICE :]))
    else:
        sample = bytes(data)
    if len(sample) >= 512 and len(zlib.compress(sample, 1)) > 0.9 * len(sample):
        return _RAW + data
    return _ZLIB + zlib.compress(data, 1)


def decode(stored: bytes, *, size: int | None = None, limit: int = 1 << 30) -> memoryview:
    """The bytes of a stored object, at most ``limit`` (exactly ``size`` if given).

    Raises:
        ValueError: unknown tag, corrupt or truncated stream, or the wrong size.
    """
    bound = limit if size is None else size
    tag, body = stored[:1], memoryview(stored)[1:]
    if tag == _RAW:
        data = body
    elif tag == _ZLIB and size is not None:
        data = _inflate_into(body, size)
    elif tag == _ZLIB:
        z = zlib.decompressobj()
        try:
            data = memoryview(z.decompress(body, bound + 1))
        except zlib.error as exc:
            raise ValueError(f"corrupt zlib stream: {exc}") from None
        if len(data) > bound:
            raise ValueError(f"inflates past the {bound} bytes expected")
        if not z.eof or z.unused_data:
            raise ValueError("truncated zlib stream, or data beyond its end")
    else:
        raise ValueError(f"unknown blob encoding {tag!r}")
    if len(data) > bound or (size is not None and len(data) != size):
        raise ValueError(f"{len(data)} bytes where {bound} were expected")
    return data


def _inflate_into(body: memoryview, size: int) -> memoryview:
    """Inflate into a buffer of exactly ``size`` bytes, a chunk at a time: at most
    ``size`` plus one chunk in memory (zlib's own output buffer would need up to
    twice the size while it grows and joins).

    Raises:
        ValueError: corrupt, truncated or trailing data, or not ``size`` bytes.
    """
    out = bytearray(size)
    view = memoryview(out)
    z = zlib.decompressobj()
    feed = (body[i : i + _INFLATE_CHUNK] for i in range(0, len(body), _INFLATE_CHUNK))
    pending: bytes | memoryview = b""
    pos = 0
    try:
        while not z.eof:
            if not pending:
                pending = next(feed, b"")  # b"": input used up, drain what zlib holds
            chunk = z.decompress(pending, min(_INFLATE_CHUNK, size - pos + 1))
            if pos + len(chunk) > size:
                raise ValueError(f"inflates past the {size} bytes expected")
            view[pos : pos + len(chunk)] = chunk
            pos += len(chunk)
            if not pending and not chunk:
                break  # truncated: no input left and nothing more comes out
            pending = z.unconsumed_tail
    except zlib.error as exc:
        raise ValueError(f"corrupt zlib stream: {exc}") from None
    if not z.eof or z.unused_data:
        raise ValueError("truncated zlib stream, or data beyond its end")
    if pos != size:
        raise ValueError(f"{pos} bytes where {size} were expected")
    return view


def pack_name(group: Iterable[Entry]) -> str:
    """A pack's name: a hash of its members' sha256 and sizes, in order. It names
    the bytes as surely as their own hash (the same members make the same
    bytes), and is known before they are read; a restore checks each member."""
    h = hashlib.sha256(b"sandgrid pack v1\n")
    for e in group:
        h.update(f"{e.sha256} {e.size}\n".encode())
    return h.hexdigest()


def group_files(entries: Iterable[Entry], small: int, pack_bytes: int) -> list[list[Entry]]:
    """Group the files to upload into blobs: a large file alone, small ones in packs
    (in path order, so a directory's files tend to share a pack)."""
    groups: list[list[Entry]] = []
    pack: list[Entry] = []
    used = 0
    for e in sorted(entries, key=lambda e: e.path):
        if e.size >= small:
            groups.append([e])
            continue
        if pack and used + e.size > pack_bytes:
            groups.append(pack)
            pack, used = [], 0
        pack.append(e)
        used += e.size
    if pack:
        groups.append(pack)
    return groups
