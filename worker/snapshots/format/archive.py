"""Tar archives at the sandbox boundary: the packs a sandbox sends, the tars a restore sends.

A small ustar/pax reader and writer of our own rather than ``tarfile``, for two
reasons. Speed: ``tarfile`` spends ~20 us on each header, 0.2 s for a
10,000-file workspace, more than the rest of a restore. Strictness: a pack comes
from inside a sandbox, so it is hostile input: ``read_packed`` accepts only
regular files with exactly the names it asked for, each once, with the size and
sha256 the scan announced, and never inflates more than those sizes allow.

Member names are absolute sandbox paths without their leading ``/`` (what
``tarfile`` writes for ``arcname=path.lstrip("/")`` and what the agent's
``unpack`` expects); ``read_packed`` also accepts them with the ``/``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

from sandgrid.errors import ErrorCode, SnapshotError
from worker.snapshots.format.entries import Entry

__all__ = [
    "BLOCK",
    "MAX_TAR_BYTES",
    "SANDBOX_UID",
    "Content",
    "Member",
    "RestoreLayout",
    "RestorePlan",
    "TarError",
    "WorkspaceChanged",
    "build_tars",
    "gunzip_bounded",
    "iter_tar",
    "layout_restore",
    "plan_restore",
    "read_packed",
    "tar_member",
    "tar_of",
]

BLOCK = 512
SANDBOX_UID = 1000
MAX_TAR_BYTES = 32 << 20
"""Largest restore tar sent in one ``unpack``: the agent's frame holds 46 MiB raw."""

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


Content = Callable[[Entry], bytes | memoryview]
"""The bytes of a file of the manifest (verified)."""


class RestorePlan(NamedTuple):
    """What a restore sends, in this order: ``tars`` (the first of a restore clears
    the roots), then each file of ``large`` in chunks, then the ``modes`` tars."""

    tars: list[bytes]
    large: list[tuple[Entry, bytes | memoryview]]
    """Files too large for a tar, with their bytes (views of the fetched blobs)."""
    modes: list[bytes]
    """Last, tars of the directories with their modes, when anything came before
    them in several pieces: until then directories are writable, so that a
    read-only directory can still be filled. Deeper paths go first, so no
    directory is closed before the ones below it have their modes."""


class RestoreLayout(NamedTuple):
    """``plan_restore`` before any content is read: each tar's entries with their
    headers (cut as they are asked for), the large files, and the ``modes`` tars."""

    tars: Iterator[list[tuple[Entry, bytes]]]
    large: list[Entry]
    modes: list[bytes]


def layout_restore(
    entries: Sequence[Entry], *, mtime: float, max_bytes: int, large_bytes: int | None
) -> RestoreLayout:
    """How ``plan_restore`` cuts a manifest, without its content: a restore that
    reads one tar's files at a time (``tar_of``) sends the same tars."""
    when = int(mtime)
    large = [e for e in entries if _is_large(e, large_bytes)]
    rest = [e for e in entries if not _is_large(e, large_bytes)] if large else entries
    multi = bool(large) or sum(e.size + 2 * BLOCK for e in rest) + 2 * BLOCK > max_bytes
    dirs = [_header(e, when, writable_dirs=False) for e in rest if e.type == "dir"] if multi else []
    return RestoreLayout(_cut(rest, when, multi, max_bytes), large, _mode_tars(dirs, max_bytes))


def _mode_tars(headers: list[bytes], max_bytes: int) -> list[bytes]:
    """The directory headers (in path order) in tars of at most ``max_bytes``, the
    last ones first: a directory's parents come before it in path order, so each
    tar leaves the directories of the tars still to come reachable."""
    tars: list[list[bytes]] = []
    used = max_bytes
    for head in headers:
        if used + len(head) > max_bytes - 2 * BLOCK:
            tars.append([])
            used = 0
        tars[-1].append(head)
        used += len(head)
    return [_tar(t) for t in reversed(tars)]


def _cut(
    entries: Sequence[Entry], mtime: int, multi: bool, max_bytes: int
) -> Iterator[list[tuple[Entry, bytes]]]:
    tar: list[tuple[Entry, bytes]] = []  # at least one tar: the one that clears
    used = 0
    for e in entries:
        head = _header(e, mtime, writable_dirs=multi)
        size = len(head) + (e.size + -e.size % BLOCK if e.type == "file" else 0)
        if used and used + size > max_bytes - 2 * BLOCK:
            yield tar
            tar, used = [], 0
        tar.append((e, head))
        used += size
    yield tar


def tar_of(members: list[tuple[Entry, bytes]], content: Content) -> bytes:
    """One tar of a ``RestoreLayout``, its files' bytes from ``content``."""
    parts: list[bytes | memoryview] = []
    for e, head in members:
        parts += [head, content(e), bytes(-e.size % BLOCK)] if e.type == "file" else [head]
    return _tar(parts)


def plan_restore(
    entries: Sequence[Entry],
    content: Content,
    *,
    mtime: float,
    max_bytes: int = MAX_TAR_BYTES,
    large_bytes: int | None = None,
) -> RestorePlan:
    """The restore of a manifest: tars of at most ``max_bytes`` (but one file),
    and the files over ``large_bytes`` set apart, their bytes never copied.

    Modes lose their setuid, setgid and sticky bits.
    """
    layout = layout_restore(entries, mtime=mtime, max_bytes=max_bytes, large_bytes=large_bytes)
    large = [(e, content(e)) for e in layout.large]
    return RestorePlan([tar_of(t, content) for t in layout.tars], large, layout.modes)


def build_tars(
    entries: Sequence[Entry], content: Content, *, mtime: float, max_bytes: int = MAX_TAR_BYTES
) -> list[bytes]:
    """The restore tar(s) of a manifest, each at most ``max_bytes`` (but one file):
    ``plan_restore`` without large files, its ``modes`` tars last."""
    plan = plan_restore(entries, content, mtime=mtime, max_bytes=max_bytes)
    return [*plan.tars, *plan.modes]


def _is_large(e: Entry, large_bytes: int | None) -> bool:
    return large_bytes is not None and e.type == "file" and e.size > large_bytes


def _tar(parts: Sequence[bytes | memoryview]) -> bytes:
    return b"".join([*parts, bytes(2 * BLOCK)])


def _header(e: Entry, mtime: int, *, writable_dirs: bool) -> bytes:
    name = e.path.lstrip("/")
    mode = e.mode & 0o777
    if e.type == "dir":
        return tar_member(name, b"5", mode | 0o700 if writable_dirs else mode, mtime=mtime)
    if e.type == "symlink":
        return tar_member(name, b"2", 0o777, linkname=e.target or "", mtime=mtime)
    return tar_member(name, b"0", mode, e.size, mtime=mtime)
