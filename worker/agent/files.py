"""Workspace file operations: ``write``, ``read``, ``list``, ``stat``, ``delete``,
``mkdir``, ``move``, ``tar_get``, ``tar_put``.

Each runs as the user (``as_user``) on a path relative to ``/workspace``,
resolved by ``beneath.locate``: a symlink met on the way is followed only while
it stays inside the workspace, one that leads out is refused
(``path_outside_workspace``), and the op then acts relative to the directory
fd that was checked, never by path again. The root is ``limits.WORKSPACE``,
read at call time (a unit test points it at a temporary tree).
"""

from __future__ import annotations

import base64
import io
import os
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import limits
from .beneath import locate, open_dir, split
from .errors import AgentError, Json
from .framing import write_all
from .limits import MAX_LIST_ENTRIES, check_size
from .safetar import extract

if TYPE_CHECKING:
    import tarfile

__all__ = [
    "do_delete",
    "do_list",
    "do_mkdir",
    "do_move",
    "do_read",
    "do_stat",
    "do_tar_get",
    "do_tar_put",
    "do_write",
    "shown",
    "walk_fd",
]

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a fifo cannot block
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def shown(rel: Any) -> str:
    """A path as entries name it: normalised, relative to the workspace (``.`` for it)."""
    return os.path.normpath("/".join(split(limits.WORKSPACE, rel)) or ".")


def _entry(rel: str, st: os.stat_result) -> Json:
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    kind = "symlink" if stat.S_ISLNK(st.st_mode) else kind
    return {
        "path": rel,
        "type": kind,
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": st.st_mtime,
    }


def walk_fd(fd: int, prefix: str) -> Iterator[tuple[str, os.stat_result, int, str]]:
    """Every entry under the directory ``fd`` (not itself) as ``(path, lstat, parent
    fd, name)``, never following a link: a directory's entries by name, then each
    subdirectory's, opened ``O_NOFOLLOW`` relative to its parent (fds held: the depth)."""
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    subdirs: list[tuple[str, str]] = []
    for e in entries:
        st = e.stat(follow_symlinks=False)
        yield prefix + e.name, st, fd, e.name
        if stat.S_ISDIR(st.st_mode):
            subdirs.append((e.name, prefix + e.name + "/"))
    for name, below in subdirs:
        try:
            sub = os.open(name, _DIR, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):  # gone or swapped since: not ours
            continue
        try:
            yield from walk_fd(sub, below)
        finally:
            os.close(sub)


def do_write(files: list[Json]) -> Json:
    """Write each ``{path, data_b64, mode}``, parents made, never through a link out."""
    for spec in files:
        rel = str(spec.get("path") or "")
        data = base64.b64decode(spec.get("data_b64") or "", validate=True)
        mode = int(spec.get("mode", 0o644)) & 0o777
        dir_fd, name = locate(limits.WORKSPACE, rel, create=True)
        try:
            if name == ".":
                raise AgentError("invalid_input", f"path {rel!r} is a directory", path=rel)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags | os.O_NONBLOCK, mode, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise AgentError("invalid_input", f"path {rel!r} is not a regular file", path=rel)
            write_all(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return {"written": len(files)}


def do_read(rel: str, max_bytes: int) -> Json:
    """A regular file's bytes, refused when larger than ``max_bytes``."""
    dir_fd, name = locate(limits.WORKSPACE, rel)
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AgentError("invalid_input", f"path {rel!r} is not a regular file", path=rel)
        if st.st_size > max_bytes:
            raise AgentError(
                "payload_too_large",
                f"file {rel!r} has {st.st_size} bytes; the cap is {max_bytes}",
                path=rel,
                size=st.st_size,
                limit=max_bytes,
            )
        data = f.read(max_bytes + 1)[:max_bytes]
    return {"data_b64": base64.b64encode(data).decode(), "size": len(data)}


def do_stat(rel: str, follow: bool) -> Json:
    """The entry of one path (a link's own with ``follow`` false); ``not_found`` when
    there is none (a link out is refused, whether or not its target exists)."""
    try:
        dir_fd, name = locate(limits.WORKSPACE, rel, follow_last=follow)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.close(dir_fd)
    except (FileNotFoundError, NotADirectoryError):  # it, or a directory on its way
        raise AgentError("not_found", f"path {rel!r} does not exist", path=rel) from None
    return _entry(shown(rel), st)


def do_list(rel: str, recursive: bool) -> Json:
    """The entries of a directory (or the one entry of a file), up to
    ``MAX_LIST_ENTRIES``, each named by its path as asked (below ``rel``)."""
    top = shown(rel)
    dir_fd, name = locate(limits.WORKSPACE, rel)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            return {"entries": [_entry(top, st)]}
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    entries: list[Json] = []
    try:
        for p, est, parent, _ in walk_fd(fd, "" if top == "." else top + "/"):
            if parent != fd and not recursive:
                break
            entries.append(_entry(p, est))
            if len(entries) > MAX_LIST_ENTRIES:
                raise AgentError(
                    "payload_too_large",
                    f"more than {MAX_LIST_ENTRIES} entries under {rel!r}",
                    path=rel,
                )
    finally:
        os.close(fd)
    return {"entries": entries}


def do_delete(rel: str, recursive: bool) -> Json:
    """Remove a file, link or directory (the workspace root itself never); how many went."""
    dir_fd, name = locate(limits.WORKSPACE, rel, follow_last=False)
    try:
        if name in (".", ".."):
            raise AgentError(
                "invalid_input", "the workspace root itself cannot be deleted", path=rel
            )
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)
            return {"deleted": 1}
        if not recursive:
            os.rmdir(name, dir_fd=dir_fd)
            return {"deleted": 1}
        fd = os.open(name, _DIR, dir_fd=dir_fd)
        try:
            count = 1 + sum(1 for _ in walk_fd(fd, ""))
        finally:
            os.close(fd)
        import shutil  # here: shutil loads bz2 and lzma, ~8 ms of the agent's start

        shutil.rmtree(name, dir_fd=dir_fd)  # fd-based on Linux: never follows a link
        return {"deleted": count}
    finally:
        os.close(dir_fd)


def do_mkdir(rel: str) -> Json:
    """Make a directory and its parents: ``{"created": bool}`` (False: it was there);
    refused (``invalid_input``) when something that is no directory is in the way."""
    dir_fd, name = locate(limits.WORKSPACE, rel, create=True)
    try:
        if name != ".":
            try:
                os.mkdir(name, 0o755, dir_fd=dir_fd)
                return {"created": True}
            except FileExistsError:
                pass
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise AgentError(
                "invalid_input",
                f"path {rel!r} exists and is no directory",
                path=rel,
                rule="mkdir needs a directory or nothing there",
            )
        return {"created": False}
    finally:
        os.close(dir_fd)


def do_move(src: str, dst: str) -> Json:
    """Rename ``src`` to ``dst`` (``rename(2)``: a link moves as a link; parents of
    ``dst`` made); the entry of ``dst``. Both resolved beneath the workspace."""
    missing = AgentError("not_found", f"source {src!r} does not exist", path=src)
    try:
        sfd, sname = locate(limits.WORKSPACE, src, follow_last=False)
    except (FileNotFoundError, NotADirectoryError):
        raise missing from None
    try:
        if sname in (".", ".."):
            raise AgentError("invalid_input", "the workspace root itself cannot be moved", path=src)
        try:
            os.stat(sname, dir_fd=sfd, follow_symlinks=False)
        except FileNotFoundError:
            raise missing from None
        dfd, dname = locate(limits.WORKSPACE, dst, follow_last=False, create=True)
        try:
            if dname in (".", ".."):
                raise AgentError("invalid_input", f"destination {dst!r} is the root", path=dst)
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
            return _entry(shown(dst), os.stat(dname, dir_fd=dfd, follow_symlinks=False))
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)


def _member(tar: tarfile.TarFile, arc: str, st: os.stat_result, parent: int, name: str) -> None:
    """Add one entry to ``tar``, read relative to its parent's fd (never by path)."""
    import tarfile  # here: tarfile loads shutil, bz2 and lzma, ~10 ms of the agent's start

    if stat.S_ISREG(st.st_mode):
        with os.fdopen(os.open(name, _READ, dir_fd=parent), "rb") as f:
            info = tar.gettarinfo(arcname=arc, fileobj=f)
            if info.isreg():
                tar.addfile(info, f)
        return
    info = tarfile.TarInfo(arc)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    info.uid, info.gid = st.st_uid, st.st_gid
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=parent)
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    else:
        return  # a socket or a device: no member (as tarfile itself skips a socket)
    tar.addfile(info)


def do_tar_get(rel: str) -> Json:
    """An uncompressed tar of a file or a tree, within the frame's raw payload cap."""
    import tarfile  # here: tarfile loads shutil, bz2 and lzma, ~10 ms of the agent's start

    buf = io.BytesIO()
    dir_fd, name = locate(limits.WORKSPACE, rel)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            if not stat.S_ISDIR(st.st_mode):
                _member(tar, name, st, dir_fd, name)
            else:
                fd = os.open(name, _DIR, dir_fd=dir_fd)
                try:
                    for p, est, parent, entry in walk_fd(fd, ""):
                        _member(tar, p, est, parent, entry)
                        check_size(buf.tell(), f"the tar of {rel!r}")
                finally:
                    os.close(fd)
    finally:
        os.close(dir_fd)
    check_size(buf.tell(), f"the tar of {rel!r}")
    return {"data_b64": base64.b64encode(buf.getvalue()).decode()}


def do_tar_put(rel: str, data: bytes) -> Json:
    """Extract a tar into a workspace directory (made when missing), checked member
    by member (``safetar``), every write relative to the directory's fd."""
    dest = os.path.normpath(os.path.join(limits.WORKSPACE, shown(rel)))
    with open_dir(limits.WORKSPACE, rel, create=True) as fd:
        return {"files": extract(data, dest, (dest,), root_fds={dest: fd})}
