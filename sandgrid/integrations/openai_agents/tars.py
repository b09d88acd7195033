"""The workspace tars the provider hands the SDK: what is left out, what is rewritten.

The grid's tar download of ``/workspace`` keeps each member as it is on disk,
so ``ln -s /workspace/src/app.py l`` is a member whose target is absolute. The
SDK's hydrate validator refuses absolute targets (they could point anywhere on
the restoring host), so a persisted tar gets every absolute target under
``/workspace`` rewritten relative to its link (``src/app.py``), which restores
the same link. A target outside ``/workspace`` is left as it is: it never
pointed into the workspace, and the SDK refuses it at hydrate, as it does for
its own backends.
"""

from __future__ import annotations

import io
import posixpath
import tarfile

from sandgrid.models import WORKSPACE

__all__ = ["member_bytes", "relative_link", "workspace_tar"]


def relative_link(name: str, target: str) -> str:
    """``target`` of the link at workspace path ``name``, relative when under ``/workspace``."""
    if not target.startswith("/"):
        return target
    norm = posixpath.normpath(target)
    if norm != WORKSPACE and not norm.startswith(WORKSPACE + "/"):
        return target
    here = posixpath.dirname(posixpath.join(WORKSPACE, name))
    return posixpath.relpath(norm, here)


def workspace_tar(data: bytes, skip: set[str]) -> bytes:
    """The tar ``data`` without the members at or under ``skip``, links made relative."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            name = member.name.removeprefix("./")
            if any(name == s or name.startswith(s + "/") for s in skip):
                continue
            if member.issym():
                member.linkname = relative_link(name, member.linkname)
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def member_bytes(data: bytes) -> bytes | None:
    """The content of the one regular file in the tar ``data`` (None when there is none)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as src:
        for member in src.getmembers():
            if member.isfile():
                f = src.extractfile(member)
                return f.read() if f is not None else b""
    return None
