"""Tar archives at the sandbox boundary: reading the packs a sandbox sends, writing headers.

A small ustar/pax reader and writer of our own rather than ``tarfile``, for two
reasons. Speed: ``tarfile`` spends ~20 us on each header, 0.2 s for a
10,000-file workspace, more than the rest of a restore. Strictness: a pack comes
from inside a sandbox, so it is hostile input: ``read_packed`` accepts only
regular files with exactly the names it asked for, each once, with the size and
sha256 the scan announced, and never inflates more than those sizes allow.

The tars a restore sends are laid out by ``restoretars`` with ``tar_member``'s
headers. Member names are absolute sandbox paths without their leading ``/`` (what
``tarfile`` writes for ``arcname=path.lstrip("/")`` and what the agent's
``unpack`` expects); ``read_packed`` also accepts them with the ``/``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from sandgrid.errors import ErrorCode, SnapshotError
from worker.snapshots.format.entries import Entry

__all__ = [
    "BLOCK",
    "SANDBOX_UID",
    "Member",
    "TarError",
    "WorkspaceChanged",
    "gunzip_bounded",
    "iter_tar",
    "read_packed",
    "tar_member",
]

BLOCK = 512
SANDBOX_UID = 1000

_ZERO = bytes(BLOCK)
_HDR = struct.Struct("100s8s8s8s12s12s8s1s100s6s2s32s32s8s8s155s12s")
_MAX_OCTAL_SIZE = 0o77777777777
_REGULAR = (b"0", b"\0")
_SLACK = 64 << 10


class TarError(ValueError):
    """The bytes are not a tar this module accepts."""


class WorkspaceChanged(SnapshotError):
    """A file changed between ``scan`` and ``pack``: scan again (retryable)."""

    default_retryable = True


class Member(NamedTuple):
    name: str
    type: bytes
    mode: int
    size: int
    linkname: str
    data: memoryview


# ---- reading ---------------------------------------------------------------------


def gunzip_bounded(data: bytes, limit: int) -> bytes:
    """Inflate a gzip stream (or pass a plain tar through), refusing more than ``limit`` bytes.

    Raises:
        TarError: corrupt, truncated, or larger than ``limit`` once inflated.
    """
    if data[:2] != b"\x1f\x8b":
        if len(data) > limit:
            raise TarError(f"archive of {len(data)} bytes is over the expected {limit}")
        return bytes(data)
    out: list[bytes] = []
    total = 0
    rest = data
    try:
        while rest and rest.strip(b"\0"):
            z = zlib.decompressobj(wbits=31)
            chunk = z.decompress(rest, limit - total + 1)
            total += len(chunk)
            out.append(chunk)
            if total > limit:
                raise TarError(f"archive inflates to more than the expected {limit} bytes")
            if not z.eof:
                raise TarError("truncated gzip stream")
            rest = z.unused_data
    except zlib.error as exc:
        raise TarError(f"corrupt gzip stream: {exc}") from None
    return b"".join(out)


def iter_tar(raw: bytes) -> Iterator[Member]:
    """The members of a ustar/pax/GNU tar, pax and GNU long names applied.

    Raises:
        TarError: bad checksum, truncated data, a global pax header, or a
            number that is not octal.
    """
    mv = memoryview(raw)
    pos, end = 0, len(raw)
    pax: dict[str, str] = {}
    while True:
        if pos + BLOCK > end:
            raise TarError("truncated tar: no end-of-archive blocks")
        hdr = bytes(mv[pos : pos + BLOCK])
        if hdr == _ZERO:
            return
        _check_checksum(hdr)
        typ = hdr[156:157]
        size = int(pax["size"]) if "size" in pax and typ not in (b"x", b"L", b"K") else None
        size = _octal(hdr[124:136]) if size is None else size
        start = pos + BLOCK
        if size < 0 or start + size > end:
            raise TarError("truncated tar member")
        pos = start + -(-size // BLOCK) * BLOCK
        data = mv[start : start + size]
        if typ == b"x":
            pax.update(_parse_pax(bytes(data)))
        elif typ in (b"L", b"K"):
            pax["path" if typ == b"L" else "linkpath"] = _text(bytes(data).rstrip(b"\0"))
        elif typ == b"g":
            raise TarError("global pax headers are refused")
        else:
            name = pax.get("path") or _ustar_name(hdr)
            link = pax.get("linkpath") or _text(hdr[157:257].split(b"\0", 1)[0])
            yield Member(name, typ, _octal(hdr[100:108]), size, link, data)
            pax = {}


def _check_checksum(hdr: bytes) -> None:
    want = _octal(hdr[148:156])
    if sum(hdr[:148]) + 8 * 32 + sum(hdr[156:]) != want:
        raise TarError("bad tar header checksum")


def _octal(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:
        raise TarError("base-256 numbers are refused")
    digits = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        raise TarError(f"bad octal number {field!r}") from None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _ustar_name(hdr: bytes) -> str:
    name = hdr[0:100].split(b"\0", 1)[0]
    if hdr[257:262] == b"ustar":
        prefix = hdr[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return _text(name)


def _parse_pax(payload: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(payload):
        sp = payload.find(b" ", pos)
        try:
            length = int(payload[pos:sp])
        except ValueError:
            raise TarError("bad pax record") from None
        record = payload[sp + 1 : pos + length]
        if length <= 0 or sp < 0 or not record.endswith(b"\n") or b"=" not in record:
            raise TarError("bad pax record")
        key, _, value = record[:-1].partition(b"=")
        out[_text(key)] = _text(value)
        pos += length
    if "size" in out and not out["size"].isdigit():
        raise TarError("bad pax size")
    return out


def read_packed(data: bytes, wanted: Mapping[str, Entry]) -> dict[str, bytes]:
    """The contents of a ``pack`` archive, keyed by sha256.

    Args:
        data: the tar.gz (or tar) that the sandbox returned.
        wanted: the files asked for, by absolute path, as the scan saw them.

    The sizes are checked here; the sha256 of each content once, by the
    store's commit before it stores the blob (``transfer.put_blob``, which
    raises the same ``WorkspaceChanged``), not twice.

    Raises:
        WorkspaceChanged: a file's size differs from the scan's, or a file is
            missing (it changed meanwhile; scan again).
        SnapshotError: ``snapshot_failed``, the archive is hostile or corrupt:
            a member not asked for, twice, not a regular file, or a bomb.
    """
    limit = sum(-(-e.size // BLOCK) * BLOCK + 4 * BLOCK for e in wanted.values()) + _SLACK
    out: dict[str, bytes] = {}
    seen: set[str] = set()
    try:
        for m in iter_tar(gunzip_bounded(data, limit)):
            path = m.name if m.name.startswith("/") else "/" + m.name
            entry = wanted.get(path)
            if entry is None or path in seen or m.type not in _REGULAR:
                raise _hostile(
                    f"member {m.name[:200]!r} was not asked for, repeats, or is not a file"
                )
            seen.add(path)
            content = bytes(m.data)  # hashed once, by the commit (``transfer.put_blob``)
            if m.size != entry.size:
                raise WorkspaceChanged(
                    f"{path} changed while it was being snapshotted",
                    operation="snapshot",
                    context={"path": path},
                )
            out[str(entry.sha256)] = content
    except TarError as exc:
        raise _hostile(str(exc)) from None
    if len(seen) != len(wanted):
        missing = sorted(set(wanted) - seen)[:5]
        raise WorkspaceChanged(
            f"the packed archive lacks {missing}",
            operation="snapshot",
            context={"missing": missing},
        )
    return out


def _hostile(why: str) -> SnapshotError:
    return SnapshotError(
        f"the sandbox's packed archive is refused: {why}",
        code=ErrorCode.SNAPSHOT_FAILED,
        operation="snapshot",
        context={"reason": why},
    )


# ---- writing ---------------------------------------------------------------------


def tar_member(
    name: str, typ: bytes, mode: int, size: int = 0, linkname: str = "", mtime: int = 0
) -> bytes:
    """The header block(s) of one member: ustar, with a pax header for what does not fit."""
    raw_name = name.encode("utf-8", "surrogateescape")
    raw_link = linkname.encode("utf-8", "surrogateescape")
    pax: dict[str, str] = {}
    prefix = b""
    if len(raw_name) > 100:
        cut = raw_name.rfind(b"/", 0, 156)
        if cut > 0 and len(raw_name) - cut - 1 <= 100:
            prefix, raw_name = raw_name[:cut], raw_name[cut + 1 :]
        else:
            pax["path"], raw_name = name, raw_name[:100]
    if len(raw_link) > 100:
        pax["linkpath"], raw_link = linkname, raw_link[:100]
    if size > _MAX_OCTAL_SIZE:
        pax["size"] = str(size)
    head = _pax_block(pax) if pax else b""
    return head + _ustar(raw_name, typ, mode, min(size, _MAX_OCTAL_SIZE), raw_link, mtime, prefix)


_UID = b"%07o\0" % SANDBOX_UID
_FIXED_SUM = sum(b" " * 8) + 2 * sum(_UID) + sum(b"ustar\0") + sum(b"00")
"""The checksum of the header fields that never change: each header then sums
only its own few bytes (the checksum of 10,000 headers costs ~1 ms, not ~30)."""


def _ustar(
    name: bytes, typ: bytes, mode: int, size: int, link: bytes, mtime: int, prefix: bytes = b""
) -> bytes:
    m, s, t = b"%07o\0" % mode, b"%011o\0" % size, b"%011o\0" % mtime
    chk = _FIXED_SUM + sum(name) + sum(m) + sum(s) + sum(t) + typ[0] + sum(link) + sum(prefix)
    return _HDR.pack(
        name, m, _UID, _UID, s, t, b"%06o\0 " % chk, typ, link, b"ustar\0", b"00",
        b"", b"", b"", b"", prefix, b"",
    )  # fmt: skip


def _pax_block(pax: Mapping[str, str]) -> bytes:
    payload = b"".join(_pax_record(k, v) for k, v in pax.items())
    pad = -len(payload) % BLOCK
    return _ustar(b"././@PaxHeader", b"x", 0o644, len(payload), b"", 0) + payload + bytes(pad)


def _pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode("utf-8", "surrogateescape")
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body
