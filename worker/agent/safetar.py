"""Safe extraction of tars (``tar_put``, ``unpack``): every member is checked first.

A member is refused when it leaves the roots, is not a file, directory or
symlink, or lies under a symlink or file (of the tar or of the tree): a bad
tar changes nothing, and no symlink is ever written through.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile

from .errors import AgentError
from .limits import inside

__all__ = [
    "blocker",
    "check_plan",
    "clear_dir",
    "extract",
    "extract_members",
    "member_target",
    "write_member",
]


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


def blocker(target: str, roots: tuple[str, ...]) -> str | None:
    """The first of the root and the ancestors of ``target`` that exists and is not
    a real directory (a symlink, a file), or None. ``lstat`` only: writing below
    a symlink would write through it, wherever it points."""
    root = next(r for r in roots if inside(target, (r,)))
    rel = os.path.relpath(os.path.dirname(target), root)
    path = root
    for part in ["", *([] if rel == "." or target == root else rel.split("/"))]:
        path = os.path.join(path, part) if part else path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return path
    return None


def check_plan(plan: list[tuple[tarfile.TarInfo, str]], roots: tuple[str, ...], disk: bool) -> None:
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
        if disk and (found := blocker(target, roots)) is not None:
            raise AgentError(
                "invalid_input",
                f"tar member {m.name!r} refused: {found} on its way is not a directory",
                member=m.name,
            )


def extract(data: bytes, base: str, roots: tuple[str, ...], clear: bool = False) -> int:
    """Extract after checking every member first, so a bad tar changes nothing."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = tar.getmembers()
            plan = [(m, member_target(m, base, roots)) for m in members]
            check_plan(plan, roots, disk=not clear)
            if clear:
                for root in roots:
                    clear_dir(root)
            return extract_members(tar, plan, roots)
    except (tarfile.TarError, EOFError) as exc:
        raise AgentError("invalid_input", f"not a readable tar: {exc}") from None


def extract_members(
    tar: tarfile.TarFile, plan: list[tuple[tarfile.TarInfo, str]], roots: tuple[str, ...]
) -> int:
    """Write the members; no symlink is ever followed (parents are ``lstat``-ed
    again, in case an earlier member or a user process put one there)."""
    dirs: list[tuple[str, int]] = []
    count = 0
    for m, target in plan:
        if (found := blocker(target, roots)) is not None:
            raise AgentError(
                "invalid_input",
                f"tar member {m.name!r} refused: {found} on its way is not a directory",
                member=m.name,
            )
        if os.path.islink(target):
            os.unlink(target)
        if m.isdir():
            os.makedirs(target, exist_ok=True)
            dirs.append((target, m.mode & 0o777))
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target) and not os.path.isdir(target):
            os.unlink(target)
        if m.issym():
            os.symlink(m.linkname, target)
        else:
            write_member(tar, m, target)
        count += 1
    for path, mode in reversed(dirs):  # last, so read-only dirs could be filled first
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return count


def write_member(tar: tarfile.TarFile, m: tarfile.TarInfo, target: str) -> None:
    """Write one regular member afresh (``O_NOFOLLOW``), with its mode and mtime."""
    src = tar.extractfile(m)
    assert src is not None
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        shutil.copyfileobj(src, f)
        os.fchmod(fd, m.mode & 0o777)
    os.utime(target, (m.mtime, m.mtime), follow_symlinks=False)


def clear_dir(root: str) -> None:
    """Empty a root before a full restore, closed directories included."""
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            for dirpath, _, _ in os.walk(entry.path):
                os.chmod(dirpath, 0o700)
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
