"""Workspace file operations (``write``, ``read``, ``list``, ``delete``, ``tar_get``, ``tar_put``).

Each runs as the user (``as_user``) on paths relative to ``/workspace``;
``resolve`` refuses any that lands outside it once symlinks are followed.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import stat
import tarfile
from collections.abc import Iterator
from typing import Any

from .errors import AgentError, Json
from .framing import write_all
from .limits import MAX_LIST_ENTRIES, WORKSPACE, check_size, inside
from .safetar import extract

__all__ = [
    "do_delete",
    "do_list",
    "do_read",
    "do_tar_get",
    "do_tar_put",
    "do_write",
    "resolve",
    "walk",
]


def resolve(rel: Any, *, follow: bool = True) -> str:
    """The real path of a workspace path, refused when it leaves ``/workspace``."""
    if not isinstance(rel, str) or not rel or "\0" in rel:
        raise AgentError("invalid_input", f"path {rel!r} must be a non-empty string", field="path")
    full = os.path.normpath(os.path.join(WORKSPACE, rel))
    if follow:
        real = os.path.realpath(full)
    else:
        real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
    if not inside(real, (WORKSPACE,)):
        raise AgentError(
            "path_outside_workspace",
            f"path {rel!r} resolves to {real!r}, outside /workspace",
            path=rel,
        )
    return real


def _rel_entry(path: str, st: os.stat_result) -> Json:
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    kind = "symlink" if stat.S_ISLNK(st.st_mode) else kind
    rel = os.path.relpath(path, WORKSPACE)
    return {
        "path": rel,
        "type": kind,
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": st.st_mtime,
    }


def walk(top: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``top`` (not ``top``), never following symlinks."""
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in sorted(it, key=lambda e: e.name):
                st = entry.stat(follow_symlinks=False)
                yield entry.path, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)


def do_write(files: list[Json]) -> Json:
    """Write each ``{path, data_b64, mode}``, parents made, never through a final symlink."""
    for spec in files:
        path = resolve(spec.get("path"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        resolve(os.path.relpath(path, WORKSPACE))
        data = base64.b64decode(spec.get("data_b64") or "", validate=True)
        mode = int(spec.get("mode", 0o644)) & 0o777
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            write_all(fd, data)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return {"written": len(files)}


def do_read(rel: str, max_bytes: int) -> Json:
    """A regular file's bytes, refused when larger than ``max_bytes``."""
    path = resolve(rel)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
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


def do_list(rel: str, recursive: bool) -> Json:
    """The entries of a directory (or the one entry of a file), up to ``MAX_LIST_ENTRIES``."""
    path = resolve(rel)
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return {"entries": [_rel_entry(path, st)]}
    entries: list[Json] = []
    items = (
        walk(path)
        if recursive
        else (
            (e.path, e.stat(follow_symlinks=False))
            for e in sorted(os.scandir(path), key=lambda e: e.name)
        )
    )
    for p, est in items:
        entries.append(_rel_entry(p, est))
        if len(entries) > MAX_LIST_ENTRIES:
            raise AgentError(
                "payload_too_large", f"more than {MAX_LIST_ENTRIES} entries under {rel!r}", path=rel
            )
    return {"entries": entries}


def do_delete(rel: str, recursive: bool) -> Json:
    """Remove a file, link or directory (the workspace root itself never); how many went."""
    path = resolve(rel, follow=False)
    if path == WORKSPACE:
        raise AgentError("invalid_input", "the workspace root itself cannot be deleted", path=rel)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return {"deleted": 1}
    if not recursive:
        os.rmdir(path)
        return {"deleted": 1}
    count = 1 + sum(1 for _ in walk(path))
    shutil.rmtree(path)
    return {"deleted": count}


def do_tar_get(rel: str) -> Json:
    """An uncompressed tar of a file or a tree, within the frame's raw payload cap."""
    path = resolve(rel)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        if not os.path.isdir(path):
            tar.add(path, arcname=os.path.basename(path), recursive=False)
        for p, _ in walk(path) if os.path.isdir(path) else ():
            tar.add(p, arcname=os.path.relpath(p, path), recursive=False)
            check_size(buf.tell(), f"the tar of {rel!r}")
    check_size(buf.tell(), f"the tar of {rel!r}")
    return {"data_b64": base64.b64encode(buf.getvalue()).decode()}


def do_tar_put(rel: str, data: bytes) -> Json:
    """Extract a tar into a workspace directory, checked member by member (``safetar``)."""
    dest = resolve(rel)
    os.makedirs(dest, exist_ok=True)
    return {"files": extract(data, dest, (WORKSPACE,))}
