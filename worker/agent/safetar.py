"""Safe extraction of tars (``tar_put``, ``unpack``): every member is checked first.

A member is refused when it leaves the roots, is not a file, directory or
symlink, or lies under a symlink or file (of the tar or of the tree): a bad
tar changes nothing, and no symlink is ever written through.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
from typing import TYPE_CHECKING

from .errors import AgentError
from .limits import inside

if TYPE_CHECKING:
    import tarfile

__all__ = [
    "Blocked",
    "Fds",
    "below",
    "blocker",
    "check_plan",
    "clear_dir",
    "extract",
    "extract_members",
    "member_target",
    "parent_fd",
    "write_member",
]

Fds = dict[str, int]
"""Roots already open, by their path: what to write below instead of the path."""

_DIR_NOPATH = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_PATH | _DIR_NOPATH


class Blocked(Exception):
    """A symlink or a file where a directory must be, on the way to a member."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def member_target(m: tarfile.TarInfo, base: str, roots: tuple[str, ...]) -> str:
    """Where a member lands, refused unless it stays inside the roots. A symlink's
    target is data (it is created, never followed), so it is not checked."""
    name = m.name
    bad = AgentError("invalid_input", f"tar member {name!r} refused: ", member=name)
    if name.startswith("/") or ".." in name.split("/") or "\0" in name:
        bad.message += "absolute path or '..'"
        raise bad
    if not (m.isreg() or m.isdir() or m.issym()):
        bad.message += "only regular files, directories and symlinks are accepted"
        raise bad
    target = os.path.normpath(os.path.join(base, name))
    if not inside(target, roots):
        bad.message += "it lands outside " + ", ".join(roots)
        raise bad
    if target in roots and not m.isdir():  # else a clear would empty it, then fail
        bad.message += "a root can only be a directory"
        raise bad
    return target


def below(target: str, roots: tuple[str, ...]) -> tuple[str, list[str]]:
    """The root ``target`` is under, and its components below it (none: the root)."""
    root = next(r for r in roots if inside(target, (r,)))
    rel = os.path.relpath(target, root)
    return root, [] if rel == "." else rel.split("/")


def _open_root(root: str, root_fds: Fds) -> int:
    return os.dup(root_fds[root]) if root in root_fds else os.open(root, _DIR)


def parent_fd(root: str, parts: list[str], root_fds: Fds, create: bool) -> int | None:
    """An fd of the directory that holds ``parts[-1]`` below ``root``, each
    component opened ``O_NOFOLLOW`` relative to the last (made when missing with
    ``create``, else None); ``Blocked`` names a link or file on the way."""
    try:
        fd = _open_root(root, root_fds)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Blocked(root) from None
        raise
    path = root
    for name in parts[:-1]:
        path = os.path.join(path, name)
        try:
            sub = os.open(name, _DIR, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                os.close(fd)
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fd)
            sub = os.open(name, _DIR, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or a file
                raise Blocked(path) from None
            raise
        os.close(fd)
        fd = sub
    return fd


def blocker(target: str, roots: tuple[str, ...], root_fds: Fds | None = None) -> str | None:
    """The first of the root and the ancestors of ``target`` that exists and is not
    a real directory (a symlink, a file), or None. Nothing is followed: writing
    below a symlink would write through it, wherever it points."""
    root, parts = below(target, roots)
    try:
        fd = parent_fd(root, parts or ["."], root_fds or {}, create=False)
    except Blocked as exc:
        return exc.path
    if fd is not None:
        os.close(fd)
    return None


def check_plan(
    plan: list[tuple[tarfile.TarInfo, str]],
    roots: tuple[str, ...],
    disk: bool,
    root_fds: Fds | None = None,
) -> None:
    """Refuse a member under a symlink or file of the same tar, or (``disk``) of
    the tree it goes into, before anything is written."""
    kinds = {target: m for m, target in plan}
    for m, target in plan:
        parent = os.path.dirname(target)
        while parent not in roots and parent != "/":
            other = kinds.get(parent)
            if other is not None and not other.isdir():
                raise AgentError(
                    "invalid_input",
                    f"tar member {m.name!r} refused: it lies under {other.name!r}, not a directory",
                    member=m.name,
                )
            parent = os.path.dirname(parent)
        if disk and (found := blocker(target, roots, root_fds)) is not None:
            raise _refused(m, found)


def extract(
    data: bytes,
    base: str,
    roots: tuple[str, ...],
    clear: bool = False,
    root_fds: Fds | None = None,
) -> int:
    """Extract after checking every member first, so a bad tar changes nothing.
    ``root_fds``: a root already opened (``tar_put``'s directory, resolved beneath
    the workspace); a root not in it is opened by its path, never through a link."""
    import tarfile  # here: tarfile loads shutil, bz2 and lzma, ~10 ms of the agent's start

    fds = root_fds or {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = tar.getmembers()
            plan = [(m, member_target(m, base, roots)) for m in members]
            check_plan(plan, roots, disk=not clear, root_fds=fds)
            if clear:
                for root in roots:
                    clear_dir(root)
            return extract_members(tar, plan, roots, fds)
    except (tarfile.TarError, EOFError) as exc:
        raise AgentError("invalid_input", f"not a readable tar: {exc}") from None


def _refused(m: tarfile.TarInfo, found: str) -> AgentError:
    return AgentError(
        "invalid_input",
        f"tar member {m.name!r} refused: {found} on its way is not a directory",
        member=m.name,
    )


def extract_members(
    tar: tarfile.TarFile,
    plan: list[tuple[tarfile.TarInfo, str]],
    roots: tuple[str, ...],
    root_fds: Fds | None = None,
) -> int:
    """Write the members, each relative to its parent directory's fd, reached
    component by component with ``O_NOFOLLOW`` (in case an earlier member or a
    user process put a link there): no symlink is ever followed."""
    fds = root_fds or {}
    dirs: list[tuple[tarfile.TarInfo, str]] = []
    count = 0
    for m, target in plan:
        root, parts = below(target, roots)
        if not parts:  # the root itself (a directory member): only its mode
            dirs.append((m, target))
            continue
        try:
            fd = parent_fd(root, parts, fds, create=True)
        except Blocked as exc:
            raise _refused(m, exc.path) from None
        assert fd is not None
        try:
            count += _write_at(tar, m, fd, parts[-1])
        finally:
            os.close(fd)
        if m.isdir():
            dirs.append((m, target))
    for m, path in reversed(dirs):  # last, so read-only dirs could be filled first
        root, parts = below(path, roots)
        fd = parent_fd(root, parts or ["."], fds, create=False)
        assert fd is not None
        try:
            sub = os.open(parts[-1] if parts else ".", os.O_RDONLY | _DIR_NOPATH, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            os.fchmod(sub, m.mode & 0o777)
        finally:
            os.close(sub)
    return count


def _write_at(tar: tarfile.TarFile, m: tarfile.TarInfo, fd: int, name: str) -> int:
    """Write one member as ``name`` in the directory ``fd``: what is in the way
    (a link, a file) is removed, never written through; 1 for a file or link."""
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    is_dir = st is not None and stat.S_ISDIR(st.st_mode)
    if m.isdir():
        if st is not None and not is_dir:
            os.unlink(name, dir_fd=fd)
        if not is_dir:
            os.mkdir(name, 0o755, dir_fd=fd)
        return 0
    if st is not None and not is_dir:
        os.unlink(name, dir_fd=fd)
    if m.issym():
        os.symlink(m.linkname, name, dir_fd=fd)
    else:
        write_member(tar, m, fd, name)
    return 1


def write_member(tar: tarfile.TarFile, m: tarfile.TarInfo, dir_fd: int, name: str) -> None:
    """Write one regular member afresh (``O_NOFOLLOW``), with its mode and mtime."""
    import shutil  # here: shutil loads bz2 and lzma, ~8 ms of the agent's start

    src = tar.extractfile(m)
    assert src is not None
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        shutil.copyfileobj(src, f)
        f.flush()
        os.fchmod(fd, m.mode & 0o777)
        os.utime(fd, (m.mtime, m.mtime))


def clear_dir(root: str) -> None:
    """Empty a root before a full restore, closed directories included; every
    entry reached relative to its parent's fd, no link ever followed."""
    import shutil  # here: shutil loads bz2 and lzma, ~8 ms of the agent's start

    fd = os.open(root, os.O_RDONLY | _DIR_NOPATH)
    try:
        with os.scandir(fd) as it:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
        for name, is_dir in entries:
            if is_dir:
                _open_up(fd, name)
                shutil.rmtree(name, dir_fd=fd)  # fd-based on Linux
            else:
                os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _open_up(parent: int, name: str) -> None:
    """Give the owner rwx on a directory and on every one below it (so that
    ``rmtree`` can empty those the user closed), never through a link."""
    try:
        os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
    except NotImplementedError:  # no AT_SYMLINK_NOFOLLOW: it was a directory a moment ago
        if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            os.chmod(name, 0o700, dir_fd=parent)
    sub = os.open(name, os.O_RDONLY | _DIR_NOPATH, dir_fd=parent)
    try:
        with os.scandir(sub) as it:
            below = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for child in below:
            _open_up(sub, child)
    finally:
        os.close(sub)
