"""Snapshot transfer: ``pack`` files into a tar, ``unpack`` one, and read or write ranges.

Large files travel in ranges (``read_range``, ``write_range``) so no frame
exceeds the cap; every path must stay below the snapshot roots, and no write
ever goes through a symlink: a chunk is written relative to its directory's
fd, reached component by component with ``O_NOFOLLOW`` (``safetar.parent_fd``).

``pack_tar`` and ``read_range`` return bytes; ``do_pack`` and ``do_read_range``
are their replies, each a ``Payload``: the bytes cross the channel raw, in a
binary frame (``framing.send``), never as base64 in JSON.
The roots are the sandbox's (``limits.ROOTS``) unless given:
the host-directory double of the tests (tests/support/hostdir.py) runs these
same functions with the roots, and the ``base`` that stands for ``/``, under
a host directory.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import stat
from typing import Any

from . import limits
from .access import open_own, reaching
from .errors import AgentError, Json
from .framing import Payload
from .limits import check_size, inside
from .safetar import Blocked, below, extract, parent_fd

__all__ = [
    "do_pack",
    "do_read_range",
    "do_unpack",
    "do_write_range",
    "own_file",
    "pack_tar",
    "read_range",
]


def own_file(path: Any, roots: tuple[str, ...] | None = None) -> str:
    """A path ``pack`` and ``read_range`` may read: absolute, normalised, under the roots."""
    within = limits.ROOTS if roots is None else roots
    if (
        not isinstance(path, str)
        or not inside(os.path.realpath(path), within)
        or path != os.path.normpath(path)
    ):
        raise AgentError("invalid_input", f"file {path!r} is not inside {list(within)}", path=path)
    return path


def pack_tar(files: list[str], roots: tuple[str, ...] | None = None, base: str = "") -> bytes:
    """A plain tar of regular files under the roots, each named by its path below
    ``base`` (``/``), without the leading ``/``.

    Not compressed: the tar only crosses the sandbox's own channel to the worker,
    which compresses what it stores (``format.blobs.encode``); gzip here cost
    ~30 ms a MiB of the turn's snapshot, more under gVisor, for nothing.
    """
    import tarfile  # here: tarfile loads shutil, bz2 and lzma, ~10 ms of the agent's start

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            st = reaching(own_file(path, roots), functools.partial(os.lstat, path), roots)
            if not stat.S_ISREG(st.st_mode):
                raise AgentError("invalid_input", f"{path!r} is not a regular file", path=path)
            with open_own(path, roots) as f:
                name = path[len(base) :].lstrip("/")
                tar.addfile(tar.gettarinfo(arcname=name, fileobj=f), f)
            check_size(buf.tell(), "the packed tar")
    check_size(len(buf.getvalue()), "the packed tar")
    return buf.getvalue()


def do_pack(files: list[str]) -> Payload:
    """The ``pack`` reply: ``pack_tar`` of the files, raw."""
    return Payload({}, pack_tar(files))


def do_unpack(data: bytes, roots: tuple[str, ...], clear: bool) -> Json:
    """Extract a snapshot tar at ``/`` into the roots (emptied first when ``clear``)."""
    return {"files": extract(data, "/", roots, clear)}


def read_range(
    path: Any, offset: int, length: int, roots: tuple[str, ...] | None = None
) -> tuple[bytes, int, int]:
    """Up to ``length`` bytes of a regular file from ``offset``, and the file's
    size and mtime (ns) after the read (a change between two reads shows there)."""
    if offset < 0 or length < 0:
        raise AgentError("invalid_input", "offset and length must not be negative", field="offset")
    check_size(length, "the range asked for")
    with open_own(own_file(path, roots), roots) as f:
        fd = f.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AgentError("invalid_input", f"{path!r} is not a regular file", path=path)
        parts: list[bytes] = []
        done = 0
        while done < length and (block := os.pread(fd, length - done, offset + done)):
            parts.append(block)
            done += len(block)
        st = os.fstat(fd)
    return b"".join(parts), st.st_size, st.st_mtime_ns


def do_read_range(path: Any, offset: int, length: int) -> Payload:
    """The ``read_range`` reply: ``read_range``'s bytes (raw), size and mtime."""
    data, size, mtime_ns = read_range(path, offset, length)
    return Payload({"size": size, "mtime_ns": mtime_ns}, data)


def do_write_range(
    path: Any,
    offset: int,
    data: bytes | memoryview,
    roots: tuple[str, ...],
    mode: int,
    final: bool,
    mtime: float | None,
) -> Json:
    """Write one chunk of a file below the roots. Offset 0 creates it afresh (what
    is in the way is removed, never written through); a later chunk must find
    it exactly ``offset`` bytes long; the final one sets its mode and mtime."""
    bad = AgentError("invalid_input", f"file {path!r} refused: ", path=path)
    if not isinstance(path, str) or "\0" in path or path != os.path.normpath(path):
        bad.message += "not a normalised path"
        raise bad
    if not inside(path, roots) or path in roots or offset < 0:
        bad.message += f"not below {list(roots)}, or a negative offset"
        raise bad
    fd = _open_chunk(path, roots, offset, bad)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != offset:
            bad.message += f"it holds {st.st_size} bytes, not {offset}: a chunk out of order"
            raise bad
        view, at = memoryview(data), offset
        while view:
            done = os.pwrite(fd, view, at)
            view, at = view[done:], at + done
        if final:
            os.fchmod(fd, mode & 0o777)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
        return {"size": os.fstat(fd).st_size}
    except OSError as exc:  # ENOSPC above all: name the file in the error
        raise OSError(exc.errno, exc.strerror, exc.filename or path) from None
    finally:
        os.close(fd)


def _open_chunk(path: str, roots: tuple[str, ...], offset: int, bad: AgentError) -> int:
    """The fd a chunk is written to, opened relative to its directory's fd (reached
    with no link followed): at offset 0 a new file (what was there removed)."""
    root, parts = below(path, roots)
    try:
        dir_fd = parent_fd(root, parts, {}, create=offset == 0)
    except Blocked as exc:
        bad.message += f"{exc.path} on its way is not a directory"
        raise bad from None
    if dir_fd is None:  # a later chunk of a file whose directory is gone
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    name, flags = parts[-1], os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        if offset == 0:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    bad.message += "a directory is in the way"
                    raise bad
                os.unlink(name, dir_fd=dir_fd)
            flags |= os.O_CREAT | os.O_EXCL
        return os.open(name, flags, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
