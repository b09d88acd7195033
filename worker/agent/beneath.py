"""Paths resolved beneath a root: no file op ever follows a symlink out of ``/workspace``.

``locate(root, path)`` answers a directory fd and a last name in it; every op
then works relative to that fd (``os.open(name, dir_fd=)``, ``os.mkdir``,
``os.unlink``, ``os.rename(src_dir_fd=, dst_dir_fd=)``, ``os.scandir(fd)``), so
a component swapped for a symlink between the check and the use cannot lead
out: the fd is the directory that was checked.

The rule: a symlink met on the way (in a directory position, or last when the
op follows it) is followed only while its target stays beneath the root. A
relative target (``node_modules/.bin/x -> ../x/cli.js``) and an absolute one
inside the root (``/workspace/lib``) are followed; one that leads out
(``/tmp``, ``../../etc``), even through a chain of links, is refused
(``path_outside_workspace``). The link itself is data: it may point anywhere,
and ``delete`` or ``move`` of a link acts on the link.

Two ways to resolve, one answer. Where the kernel has ``openat2`` (Linux 5.6)
the directory is opened with ``RESOLVE_BENEATH``: the kernel refuses any
escape, ``..`` races included. It also refuses absolute links and magic links
altogether, and ``ENOSYS`` (an older gVisor or kernel) or ``EPERM`` (a seccomp
profile without it) says it is missing: for those, and for a last name that is
a link to follow, the per-component walk decides (``walk``): each component
is ``lstat``-ed and opened ``O_PATH | O_NOFOLLOW | O_DIRECTORY`` relative to
its parent's fd, a link's target read with ``readlinkat`` and resolved by the
same rule, ``..`` taken back along the fds already walked (never above the
root), at most ``MAX_LINKS`` links. The fast path only ever answers what the
walk would; anything else it leaves to the walk.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator

from .errors import AgentError

__all__ = [
    "MAX_LINKS",
    "RESOLVE_BENEATH",
    "RESOLVE_NO_MAGICLINKS",
    "SYS_OPENAT2",
    "Openat2",
    "locate",
    "open_dir",
    "open_root",
    "openat2",
    "outside",
    "split",
    "walk",
]

MAX_LINKS = 40
"""Links followed in one path at most (the kernel's own limit): more is a loop."""

SYS_OPENAT2 = 437  # the same number on every architecture (the unified syscall table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class Openat2:
    """Whether ``openat2`` is there: cleared at the first ``ENOSYS``/``EPERM``
    (or by a test, to drive the walk alone)."""

    available = True


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def openat2(dir_fd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """``openat2(dir_fd, path, {flags, mode, resolve})``: a new fd, or ``OSError``."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def outside(path: str, why: str) -> AgentError:
    """The refusal of a path that would leave the root: 422 ``path_outside_workspace``."""
    return AgentError(
        "path_outside_workspace",
        f"path {path!r} refused: {why}; a file op never follows a symlink out of /workspace",
        path=path,
        rule="resolved beneath /workspace",
    )


def split(root: str, path: str) -> list[str]:
    """The components of ``path`` below ``root`` (absolute only when inside it), or
    a refusal. ``.`` and empty components are dropped; ``..`` is kept for the walk."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise AgentError("invalid_input", f"path {path!r} must be a non-empty string", field="path")
    if path.startswith("/"):
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            raise outside(path, f"an absolute path outside {root}")
        path = path[len(root) :]
    return [p for p in path.split("/") if p not in ("", ".")]


def open_root(root: str) -> int:
    """An ``O_PATH`` fd of the root itself (a real directory: the sandbox's mount)."""
    return os.open(root, _DIR_FLAGS)


def _step(stack: list[int], parts: list[str], root: str, path: str, create: bool) -> int:
    """Take one component off ``parts`` (reversed) into ``stack``: a directory
    entered, a link's target queued, ``..`` taken back, a missing one made.
    1 when a link was queued or the component must be looked at again (what
    ``MAX_LINKS`` counts, so that neither a loop nor a racer can spin), else 0."""
    name = parts.pop()
    if name == "..":
        if len(stack) == 1:
            raise outside(path, "'..' leads above the root")
        os.close(stack.pop())
        return 0
    try:
        st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from None
        parts.append(name)
        try:
            os.mkdir(name, 0o755, dir_fd=stack[-1])
        except FileExistsError:  # a racer made something there: look again
            return 1
        return 0
    if stat.S_ISLNK(st.st_mode):
        _queue_link(stack, parts, root, path, os.readlink(name, dir_fd=stack[-1]))
        return 1
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    try:
        stack.append(os.open(name, _DIR_FLAGS, dir_fd=stack[-1]))
    except OSError as exc:  # swapped for a link (ELOOP) or a file since the lstat
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        parts.append(name)  # looked at again, as what it is now
        return 1
    return 0


def _queue_link(stack: list[int], parts: list[str], root: str, path: str, target: str) -> None:
    """Queue a link's target: relative to where the link is, absolute from the root."""
    if target.startswith("/"):
        try:
            below = split(root, target)
        except AgentError:
            raise outside(path, f"a symlink on the way points to {target!r}") from None
        while len(stack) > 1:
            os.close(stack.pop())
    else:
        below = [p for p in target.split("/") if p not in ("", ".")]
    parts.extend(reversed(below))


def walk(root_fd: int, root: str, path: str, *, follow_last: bool, create: bool) -> tuple[int, str]:
    """The per-component walk: ``(dir fd, name)`` of ``path``'s last component, or
    ``(dir fd of path, ".")`` when it names a directory reached by ``..`` or is the root.

    ``follow_last`` follows a last component that is a link (by the same rule);
    ``create`` makes missing directories on the way (never the last one). The
    caller owns (closes) the fd.
    """
    parts = list(reversed(split(root, path)))
    stack = [os.dup(root_fd)]
    links = 0
    try:
        while parts:
            if len(parts) == 1 and parts[0] != "..":
                name = parts[0]
                try:
                    st = os.stat(name, dir_fd=stack[-1], follow_symlinks=False)
                except FileNotFoundError:
                    return stack.pop(), name
                if not (follow_last and stat.S_ISLNK(st.st_mode)):
                    return stack.pop(), name
            links += _step(stack, parts, root, path, create)
            if links > MAX_LINKS:
                raise AgentError("invalid_input", f"path {path!r}: too many symlinks", path=path)
        return stack.pop(), "."
    finally:
        for fd in stack:
            os.close(fd)


def _fast(root_fd: int, parts: list[str]) -> int | None:
    """The parent directory by ``openat2(RESOLVE_BENEATH)``, or None: the walk decides."""
    if not Openat2.available or not parts[:-1]:
        return None
    try:
        return openat2(
            root_fd, "/".join(parts[:-1]), _DIR_FLAGS, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS
        )
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM):
            Openat2.available = False
        return None  # EXDEV (out, or an absolute link), ELOOP, ENOENT...: the walk answers


def locate(
    root: str, path: str, *, follow_last: bool = True, create: bool = False
) -> tuple[int, str]:
    """``(dir fd, name)`` of ``path`` beneath ``root``, as ``walk`` answers it (the
    caller closes the fd); refused (``path_outside_workspace``) when it leads out."""
    parts = split(root, path)
    root_fd = open_root(root)
    try:
        dir_fd = _fast(root_fd, parts) if parts and ".." not in parts else None
        if dir_fd is not None:
            try:
                st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
                plain = not (follow_last and stat.S_ISLNK(st.st_mode))
            except FileNotFoundError:
                plain = True
            if plain:
                return dir_fd, parts[-1]
            os.close(dir_fd)
        return walk(root_fd, root, path, follow_last=follow_last, create=create)
    finally:
        os.close(root_fd)


@contextlib.contextmanager
def open_dir(root: str, path: str, *, create: bool = False) -> Iterator[int]:
    """A readable fd of the directory ``path`` names (links followed beneath the
    root), made when missing with ``create``; closed after the block."""
    dir_fd, name = locate(root, path, create=create)
    try:
        if create and name != ".":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=dir_fd)
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
        )
    finally:
        os.close(dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)
