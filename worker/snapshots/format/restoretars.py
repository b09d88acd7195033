"""The tars a restore sends into a sandbox: a manifest cut into ``unpack``-sized tars.

``plan_restore`` (and ``layout_restore``, which cuts without reading any content,
for a restore that fetches one tar's files at a time) lays a manifest out as
tars of at most ``MAX_TAR_BYTES`` (the agent's frame), the files over a size
set apart to travel in chunks, and, when the restore comes in several pieces,
the directories' modes last (until then every directory is writable, so a
read-only one can still be filled). The headers are ``archive.tar_member``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from worker.snapshots.format.archive import BLOCK, tar_member
from worker.snapshots.format.entries import Entry

__all__ = [
    "MAX_TAR_BYTES",
    "Content",
    "RestoreLayout",
    "RestorePlan",
    "build_tars",
    "layout_restore",
    "plan_restore",
    "tar_of",
]

MAX_TAR_BYTES = 32 << 20
"""Largest restore tar sent in one ``unpack``: the agent's frame holds 46 MiB raw."""


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
