"""Reading what the user closed: a snapshot must see every file under the roots.

The user may make a file unreadable to themselves or close a directory; the
scanning child (running as the user) opens them for the moment and puts the
modes back, the deepest first. Nothing is ever followed through a symlink.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from typing import IO, Any

from . import limits

__all__ = [
    "lending",
    "listing",
    "no_follow",
    "open_own",
    "passable",
    "reaching",
    "settled_ctime",
    "sha256_of",
    "small_file",
]


def no_follow(path: str, flags: int) -> int:
    """``open``'s opener: never through a symlink, and a fifo cannot block the open."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def open_own(path: str, roots: tuple[str, ...] | None = None) -> IO[bytes]:
    """Open a file of the user for reading, even one they made unreadable or put
    in a directory they closed (both opened for the moment, then put back;
    ``roots`` as for ``passable``)."""
    try:
        return open(path, "rb", opener=no_follow)
    except PermissionError:
        with lending() as lent:
            passable(path, lent, roots)
            mode = os.lstat(path).st_mode
            os.chmod(path, stat.S_IMODE(mode) | 0o400)
            try:
                return open(path, "rb", opener=no_follow)
            finally:
                os.chmod(path, stat.S_IMODE(mode))


def sha256_of(path: str) -> str:
    """The hex SHA-256 of a user's file, read in 1 MiB blocks (see ``open_own``)."""
    import hashlib  # here: OpenSSL's load is ~25 ms of the agent's start under gVisor

    h = hashlib.sha256()
    with open_own(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def small_file(path: str) -> tuple[str, bytes]:
    """The hex SHA-256 of a small user's file and its bytes, from one read (see
    ``open_own``): a scan hands them on with the row, so the bytes are those hashed."""
    import hashlib  # see sha256_of

    with open_own(path) as f:
        data = f.read()
    return hashlib.sha256(data).hexdigest(), data


@contextlib.contextmanager
def lending() -> Iterator[list[tuple[str, int]]]:
    """Directories whose modes were widened for a walk, put back after it (the
    deepest first, while those above them are still open)."""
    lent: list[tuple[str, int]] = []
    try:
        yield lent
    finally:
        for path, mode in reversed(lent):
            os.chmod(path, mode)


def listing(path: str, lent: list[tuple[str, int]]) -> list[tuple[str, os.stat_result]]:
    """Each entry of a directory with its lstat. A directory the user closed to
    themselves (no r or no x for the owner) is opened to them for the rest of
    the walk and noted in ``lent``: a snapshot must see inside it.

    The user's processes run while it walks: a directory or an entry removed
    or renamed meanwhile is not there, and is left out."""
    try:
        try:
            return _entries(path)
        except PermissionError:
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode & 0o500 == 0o500:
                raise
            os.chmod(path, mode | 0o500)
            lent.append((path, mode))
            return _entries(path)
    except FileNotFoundError:
        return []


def _entries(path: str) -> list[tuple[str, os.stat_result]]:
    found: list[tuple[str, os.stat_result]] = []
    with os.scandir(path) as it:
        for entry in it:
            try:
                found.append((entry.path, entry.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue  # gone between the listing and its lstat
    return found


def passable(path: str, lent: list[tuple[str, int]], roots: tuple[str, ...] | None = None) -> None:
    """Give the owner x on the directories under the roots on the way to
    ``path`` that lack it (noted in ``lent``), from the top down.

    ``roots``: the sandbox's ``limits.ROOTS`` unless given (a test double
    points them at a host directory)."""
    within = limits.ROOTS if roots is None else roots
    parts = path.split("/")
    for i in range(3, len(parts)):
        d = "/".join(parts[:i])
        if not limits.inside(d, within):
            continue
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o100:
            os.chmod(d, stat.S_IMODE(st.st_mode) | 0o100)
            lent.append((d, stat.S_IMODE(st.st_mode)))


def reaching(path: str, fn: Callable[[], Any], roots: tuple[str, ...] | None = None) -> Any:
    """``fn()``, and again through closed directories if it was refused on the way
    (``roots`` as for ``passable``)."""
    try:
        return fn()
    except PermissionError:
        with lending() as lent:
            passable(path, lent, roots)
            return fn()


def settled_ctime(path: str, size: int, mtime: int, ino: int, ctime: int) -> int:
    """The ctime after ``open_own`` lent a file read permission and took it back:
    kept only if nothing else changed, so the next scan does not read it again."""
    st = os.lstat(path)
    same = (st.st_size, st.st_mtime_ns, st.st_ino) == (size, mtime, ino)
    return st.st_ctime_ns if same else ctime
