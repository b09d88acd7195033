"""A test double of ``SandboxFiles`` over a host directory, without a sandbox.

A reference implementation of what the in-sandbox agent does for ``scan``,
``pack``, ``unpack``, ``read_range`` and ``write_range``
(``worker.snapshots.sandbox.SandboxFiles``, docs/agent-protocol.md), with the sandbox's ``/``
mapped to a host directory (``sbx`` is that directory's ``Path``). Tests and
the benchmark use it to run the store end to end without containers.

It is careful in the same ways as the agent: no symlink is followed when
reading or writing (every directory is opened with ``O_NOFOLLOW`` from the top),
device files, fifos and sockets are skipped, and a tar is checked whole before
anything is written (a member under a link of the same tar is refused). A
link's target is data: links to anywhere are restored as links. It is not an
isolation boundary: never point it at a directory that untrusted code can
change while it runs.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import shutil
import stat
import zlib
from bisect import bisect_left
from collections import OrderedDict
from pathlib import Path

from sandgrid.errors import ErrorCode, InvalidInput
from worker.agent_api import FileRange
from worker.snapshots.format.archive import Member, TarError, gunzip_bounded, iter_tar, tar_member
from worker.snapshots.format.entries import Row
from worker.snapshots.sandbox import SandboxFiles

__all__ = ["HostDirBackend"]

_Key = tuple[int, int, int, int, int]
"""(mode, size, mtime_ns, ctime_ns, inode): an entry unchanged since the last scan."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK  # never a link; a fifo cannot block the open
_MAX_OPEN_DIRS = 128
_UNPACK_LIMIT = 16 << 30


def _refuse(path: str, why: str) -> InvalidInput:
    return InvalidInput(
        f"{path!r} refused: {why}",
        code=ErrorCode.PATH_OUTSIDE_WORKSPACE,
        operation="snapshot",
        context={"path": path},
    )


class _Dirs:
    """Directory fds below a sandbox's ``/``, each opened without following a symlink."""

    def __init__(self, top: Path, *, create: bool) -> None:
        self.top = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
        self.create = create
        self.open: OrderedDict[str, int] = OrderedDict()

    def fd(self, path: str) -> int:
        if path == "/":
            return self.top
        if (hit := self.open.get(path)) is not None:
            self.open.move_to_end(path)
            return hit
        parent, name = posixpath.split(path)
        pfd = self.fd(parent)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        except FileNotFoundError:
            if not self.create:
                raise
            os.mkdir(name, 0o700, dir_fd=pfd)
            fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        except OSError as exc:  # ELOOP / ENOTDIR: a symlink or a file on the way
            raise _refuse(path, f"not a directory ({exc.strerror})") from None
        self.open[path] = fd
        while len(self.open) > _MAX_OPEN_DIRS:
            os.close(self.open.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        for fd in self.open.values():
            os.close(fd)
        os.close(self.top)


class HostDirBackend(SandboxFiles[Path]):
    """``scan``/``pack``/``unpack``/``read_range``/``write_range`` on host
    directories (see the module doc)."""

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, scope: tuple[str, tuple[str, ...]] | None) -> None:
        self._for = scope
        self._stats: dict[str, _Key] = {}
        self._rows: dict[str, Row] = {}
        self._sorted: list[Row] = []
        self._paths: list[str] = []

    def scan(self, sbx: Path, roots: list[str]) -> list[Row]:
        """Rows ``(path, type, mode, size, sha256, target)`` under each root (not
        the root), sorted.

        Like the agent, it keeps the last scan of the same sandbox and roots: an
        entry whose (mode, size, mtime_ns, ctime_ns, inode) did not change keeps
        its row (and hash), and only what changed is re-sorted, so an unchanged
        tree is one stat walk. (ctime moves on any write, chmod or utime, so a
        file rewritten with its old size and mtime is still seen.)
        """
        if self._for != (str(sbx), tuple(roots)):
            self._reset((str(sbx), tuple(roots)))
        changed: dict[str, tuple[_Key, Row]] = {}
        seen: set[str] = set()
        for root in roots:
            top = Path(sbx, root.lstrip("/"))
            if not top.is_symlink() and top.is_dir():
                self._walk(str(top), root, changed, seen)
        removed = [p for p in self._rows if p not in seen]
        if changed or removed:
            self._apply(changed, removed)
        return list(self._sorted)

    def _walk(
        self, top: str, root: str, changed: dict[str, tuple[_Key, Row]], seen: set[str]
    ) -> None:
        """Every entry below ``top``, stat-ed relative to its directory's fd (no
        path walk per entry, no symlink followed); new or changed ones into
        ``changed``, all into ``seen``; keyed by sandbox path."""
        known, see = self._stats.get, seen.add
        stack = [(top, root)]
        while stack:
            host_dir, sbx_dir = stack.pop()
            fd = os.open(host_dir, _DIR_FLAGS)
            try:
                with os.scandir(fd) as it:
                    for de in it:
                        st = de.stat(follow_symlinks=False)
                        key = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                        path = f"{sbx_dir}/{de.name}"
                        if known(path) != key:
                            row = _row(fd, de.name, path, st)
                            if row is None:
                                continue
                            changed[path] = (key, row)
                        see(path)
                        if stat.S_ISDIR(key[0]):
                            stack.append((f"{host_dir}/{de.name}", path))
            finally:
                os.close(fd)

    def _apply(self, changed: dict[str, tuple[_Key, Row]], removed: list[str]) -> None:
        """Fold a walk's changes into the kept rows and their sorted list."""
        rows, order, paths = self._rows, self._sorted, self._paths
        for path in removed:
            del rows[path], self._stats[path]
            i = bisect_left(paths, path)
            del order[i], paths[i]
        for path, (key, row) in changed.items():
            i = bisect_left(paths, path)
            if path in rows:
                order[i] = row
            else:
                order.insert(i, row)
                paths.insert(i, path)
            rows[path] = row
            self._stats[path] = key

    def pack(self, sbx: Path, paths: list[str]) -> bytes:
        """A tar.gz (level 1) of these regular files; names without the leading ``/``."""
        z = zlib.compressobj(1, zlib.DEFLATED, 31)
        out: list[bytes] = []
        dirs = _Dirs(sbx, create=False)
        try:
            for path in paths:
                _check_path(path)
                parent, name = posixpath.split(path)
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dirs.fd(parent))
                with os.fdopen(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        raise _refuse(path, "not a regular file")
                    data = f.read()
                head = tar_member(path.lstrip("/"), b"0", stat.S_IMODE(st.st_mode), len(data))
                out += [z.compress(head), z.compress(data), z.compress(bytes(-len(data) % 512))]
        finally:
            dirs.close()
        out += [z.compress(bytes(1024)), z.flush()]
        return b"".join(out)

    def unpack(self, sbx: Path, data: bytes, roots: list[str], clear: bool) -> int:
        """Extract a tar into the roots, emptying them first if ``clear``; every
        member is checked before anything is written. Returns files + symlinks."""
        try:
            members = list(iter_tar(gunzip_bounded(data, _UNPACK_LIMIT)))
        except TarError as exc:
            raise InvalidInput(f"not a readable tar: {exc}", operation="snapshot") from None
        plan = [(_check_member(m, roots), m) for m in members]
        _check_no_link_parents([(path, m.type) for path, m in plan])
        if clear:
            for root in roots:
                _clear(Path(sbx, root.lstrip("/")))
        dirs = _Dirs(sbx, create=True)
        count = 0
        modes: list[tuple[str, int]] = []
        try:
            for path, m in plan:
                parent, name = posixpath.split(path)
                pfd = dirs.fd(parent)
                if m.type == b"5":
                    dirs.fd(path)
                    modes.append((path, m.mode & 0o777))
                    continue
                if m.type == b"2":
                    _remove_non_dir(pfd, name)
                    os.symlink(m.linkname, name, dir_fd=pfd)
                else:
                    _write_file(pfd, name, m.data, m.mode & 0o777)
                count += 1
            for path, mode in reversed(modes):
                os.fchmod(dirs.fd(path), mode)
        finally:
            dirs.close()
        return count

    def read_range(self, sbx: Path, path: str, offset: int, length: int) -> FileRange:
        """Up to ``length`` bytes of a regular file from ``offset`` (fewer at its
        end), with its size and mtime after the read; never through a symlink."""
        _check_path(path)
        if offset < 0 or length < 0:
            raise InvalidInput("offset and length must not be negative", operation="snapshot")
        fd = _open(sbx, path, os.O_RDONLY, create=False)
        try:
            parts: list[bytes] = []
            done = 0
            while done < length and (block := os.pread(fd, length - done, offset + done)):
                parts.append(block)
                done += len(block)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return FileRange(b"".join(parts), st.st_size, st.st_mtime_ns)

    def write_range(
        self,
        sbx: Path,
        path: str,
        offset: int,
        data: bytes | memoryview,
        roots: list[str],
        *,
        mode: int,
        final: bool,
        mtime: float | None = None,
    ) -> int:
        """Write a chunk of a file below ``roots``: offset 0 creates it afresh (what
        is in the way is removed, a directory refused), a later chunk must find
        it exactly ``offset`` bytes long; the final one sets its mode and mtime.
        Returns the file's size."""
        _check_path(path)
        if not _under(path, roots) or path in roots or offset < 0:
            raise _refuse(path, "not below the roots, or a negative offset")
        fd = _open(sbx, path, os.O_WRONLY, create=offset == 0)
        try:
            st = os.fstat(fd)
            if st.st_size != offset:
                raise InvalidInput(
                    f"{path!r} holds {st.st_size} bytes, not {offset}: a chunk out of order",
                    operation="snapshot",
                    context={"path": path},
                )
            view, at = memoryview(data), offset
            while view:
                done = os.pwrite(fd, view, at)
                view, at = view[done:], at + done
            if final:
                os.fchmod(fd, mode & 0o777)
                if mtime is not None:
                    os.utime(fd, (mtime, mtime))
            return os.fstat(fd).st_size
        finally:
            os.close(fd)


def _row(dir_fd: int, name: str, path: str, st: os.stat_result) -> Row | None:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISREG(st.st_mode):
        return (path, "file", mode, st.st_size, _sha256_file(dir_fd, name), None)
    if stat.S_ISLNK(st.st_mode):
        return (path, "symlink", mode, 0, None, os.readlink(name, dir_fd=dir_fd))
    if stat.S_ISDIR(st.st_mode):
        return (path, "dir", mode, 0, None, None)
    return None


def _sha256_file(dir_fd: int, name: str) -> str:
    h = hashlib.sha256()
    with open(os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_path(path: str) -> None:
    if not path.startswith("/") or posixpath.normpath(path) != path:
        raise _refuse(path, "not an absolute normalised path")


def _open(sbx: Path, path: str, flags: int, *, create: bool) -> int:
    """A regular file's fd, never through a symlink; ``create``: made afresh (mode
    0600), after removing what is in the way (a directory is refused)."""
    parent, name = posixpath.split(path)
    dirs = _Dirs(sbx, create=create)
    try:
        pfd = dirs.fd(parent)
        if create:
            _remove_non_dir(pfd, name)
            flags |= os.O_CREAT | os.O_EXCL
        try:
            fd = os.open(name, flags | _FILE_FLAGS, 0o600, dir_fd=pfd)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise _refuse(path, "a symlink") from None
    finally:
        dirs.close()
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _refuse(path, "not a regular file")
    return fd


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _check_member(m: Member, roots: list[str]) -> str:
    path = "/" + m.name
    if m.name.startswith("/") or posixpath.normpath(path) != path or not _under(path, roots):
        raise _refuse(m.name, "outside the roots, absolute, or not normalised")
    if m.type not in (b"0", b"\0", b"5", b"2") or (path in roots and m.type != b"5"):
        raise _refuse(m.name, "only files, directories and symlinks below the roots")
    return path


def _check_no_link_parents(plan: list[tuple[str, bytes]]) -> None:
    """No member may lie under a symlink or a file of the same tar: writing it would
    go through the link. (Links already on disk are stopped by ``_Dirs``.) A
    link's own target is data and is never checked."""
    kinds = {path: typ for path, typ in plan}
    for path, _ in plan:
        parent = posixpath.dirname(path)
        while parent != "/":
            if kinds.get(parent, b"5") != b"5":
                raise _refuse(path, f"lies under {parent!r}, which is not a directory")
            parent = posixpath.dirname(parent)


def _clear(top: Path) -> None:
    if top.is_symlink():
        raise _refuse(str(top), "a root is a symlink")
    top.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(top):
        if entry.is_dir(follow_symlinks=False):
            for dirpath, _, _ in os.walk(entry.path):
                os.chmod(dirpath, 0o700)
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _write_file(dir_fd: int, name: str, data: memoryview, mode: int) -> None:
    """Create ``name`` afresh (never through a symlink), write it, set its mode."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        _remove_non_dir(dir_fd, name)
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _remove_non_dir(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(name, "a directory is in the way")
    os.unlink(name, dir_fd=dir_fd)
