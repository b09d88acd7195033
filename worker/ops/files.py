"""The file ops on this node: write, read, list, stat, delete, mkdir, move, tar
upload and download.

Each is one agent request in the session's sandbox, as the sandbox user, on a
path checked here first (``check_path``: inside the workspace) and again by
the agent, which resolves it beneath ``/workspace`` (``worker.agent.beneath``:
no symlink is followed out; a path that would leave is 422
``path_outside_workspace``, never a 500). Tar payloads are base64 in the op
and in the agent's request and reply alike, so they pass through the worker
as they came (the agent checks that they are strict base64, and checks every
member of a tar it extracts).
"""

from __future__ import annotations

import base64
from typing import Any

from sandgrid.errors import ErrorCode, InvalidInput
from sandgrid.models import MAX_FILE_BYTES, FileEntry, FileList, FileRead, FileWrite, workspace_path
from sandgrid.ops.files import (
    DeleteOp,
    DeleteResult,
    ListOp,
    MkdirOp,
    MkdirResult,
    MoveOp,
    MoveResult,
    ReadOp,
    StatOp,
    StatResult,
    TarDownloadOp,
    TarDownloadResult,
    TarUploadOp,
    TarUploadResult,
    WriteOp,
    WriteResult,
)
from worker.ops.base import SandboxContext, SandboxHandler
from worker.sandboxes import Sandbox, SandboxManager

__all__ = [
    "HANDLERS",
    "check_path",
    "delete",
    "file_list",
    "file_read",
    "get_tar",
    "list_files",
    "make_dir",
    "move",
    "put_tar",
    "read_file",
    "stat",
    "write_fields",
    "write_files",
]


# ---- the agent requests and their replies ---------------------------------------


def check_path(path: str, field: str = "path", operation: str = "") -> str:
    """Normalise a workspace path, or raise ``InvalidInput`` naming the field."""
    try:
        return workspace_path(path)
    except ValueError as exc:
        raise InvalidInput(
            str(exc),
            code=ErrorCode.PATH_OUTSIDE_WORKSPACE,
            operation=operation,
            context={"field": field, "path": path},
        ) from None


def write_fields(files: list[FileWrite]) -> dict[str, Any]:
    """The ``write`` request; ``FileWrite`` content is UTF-8 text or base64."""
    out: list[dict[str, Any]] = []
    for i, f in enumerate(files):
        if f.encoding == "base64":
            try:
                base64.b64decode(f.content, validate=True)
            except ValueError:  # binascii.Error, or a character outside ASCII
                raise InvalidInput(
                    f"files[{i}].content is not valid base64",
                    operation="files.write",
                    context={"field": f"files[{i}].content", "path": f.path},
                ) from None
            data_b64 = f.content
        else:
            data_b64 = base64.b64encode(f.content.encode()).decode()
        out.append(
            {"path": check_path(f.path, f"files[{i}].path"), "data_b64": data_b64, "mode": f.mode}
        )
    return {"files": out}


def file_read(path: str, reply: dict[str, Any], encoding: str) -> FileRead:
    """A ``FileRead``; bytes that are not UTF-8 come back as base64 whatever was asked."""
    data = base64.b64decode(reply.get("data_b64", ""))
    if encoding == "utf-8":
        try:
            return FileRead(path=path, content=data.decode(), encoding="utf-8", size=len(data))
        except UnicodeDecodeError:
            pass
    return FileRead(
        path=path, content=base64.b64encode(data).decode(), encoding="base64", size=len(data)
    )


def file_list(reply: dict[str, Any]) -> FileList:
    return FileList(entries=[FileEntry(**e) for e in reply.get("entries", [])])


# ---- the ops ----------------------------------------------------------------------


def write_files(backend: SandboxManager, sbx: Sandbox, files: list[FileWrite]) -> int:
    """Write files in the workspace as the sandbox user; return how many."""
    return int(backend.call(sbx, "write", write_fields(files))["written"])


def read_file(
    backend: SandboxManager,
    sbx: Sandbox,
    path: str,
    encoding: str = "utf-8",
    max_bytes: int = MAX_FILE_BYTES,
) -> FileRead:
    """Read one file. Raises ``InvalidInput`` (``payload_too_large``) over ``max_bytes``."""
    rel = check_path(path, operation="files.read")
    reply = backend.call(sbx, "read", {"path": rel, "max_bytes": max_bytes})
    return file_read(rel, reply, encoding)


def list_files(
    backend: SandboxManager, sbx: Sandbox, path: str = ".", recursive: bool = False
) -> FileList:
    """List a directory of the workspace (symlinks are listed, not followed)."""
    rel = check_path(path, operation="files.list")
    return file_list(backend.call(sbx, "list", {"path": rel, "recursive": recursive}))


def delete(backend: SandboxManager, sbx: Sandbox, path: str, recursive: bool = False) -> int:
    """Delete a file, a symlink (not its target) or a directory; return the count."""
    rel = check_path(path, operation="files.delete")
    return int(backend.call(sbx, "delete", {"path": rel, "recursive": recursive})["deleted"])


def stat(backend: SandboxManager, sbx: Sandbox, path: str, follow: bool = True) -> FileEntry:
    """The entry of one path; ``NotFound`` when there is none."""
    rel = check_path(path, operation="files.stat")
    return FileEntry(**backend.call(sbx, "stat", {"path": rel, "follow": follow}))


def make_dir(backend: SandboxManager, sbx: Sandbox, path: str) -> bool:
    """Make a directory and its parents; whether it was made (False: it was there)."""
    rel = check_path(path, operation="files.mkdir")
    return bool(backend.call(sbx, "mkdir", {"path": rel})["created"])


def move(backend: SandboxManager, sbx: Sandbox, source: str, destination: str) -> FileEntry:
    """Rename an entry within the workspace (a link as a link); its new entry."""
    src = check_path(source, "source", "files.move")
    dst = check_path(destination, "destination", "files.move")
    return FileEntry(**backend.call(sbx, "move", {"source": src, "destination": dst}))


def put_tar(backend: SandboxManager, sbx: Sandbox, path: str, data_b64: str) -> int:
    """Extract a tar (base64, passed on as is) under a workspace directory; every
    member must stay inside the workspace (no absolute paths, ``..``, devices,
    links out). How many files it held."""
    rel = check_path(path, operation="files.tar_upload")
    return int(backend.call(sbx, "tar_put", {"path": rel, "data_b64": data_b64})["files"])


def get_tar(backend: SandboxManager, sbx: Sandbox, path: str = ".") -> str:
    """A tar of a workspace path, member names relative to it: the agent's base64."""
    rel = check_path(path, operation="files.tar_download")
    return str(backend.call(sbx, "tar_get", {"path": rel})["data_b64"])


# ---- the handlers -----------------------------------------------------------------


def _write(ctx: SandboxContext, op: WriteOp) -> WriteResult:
    return WriteResult(written=write_files(ctx.backend, ctx.sandbox, op.files))


def _read(ctx: SandboxContext, op: ReadOp) -> FileRead:
    return read_file(ctx.backend, ctx.sandbox, op.path, op.encoding)


def _list(ctx: SandboxContext, op: ListOp) -> FileList:
    return list_files(ctx.backend, ctx.sandbox, op.path, op.recursive)


def _delete(ctx: SandboxContext, op: DeleteOp) -> DeleteResult:
    return DeleteResult(deleted=delete(ctx.backend, ctx.sandbox, op.path, op.recursive))


def _stat(ctx: SandboxContext, op: StatOp) -> StatResult:
    return StatResult(entry=stat(ctx.backend, ctx.sandbox, op.path, op.follow))


def _mkdir(ctx: SandboxContext, op: MkdirOp) -> MkdirResult:
    return MkdirResult(created=make_dir(ctx.backend, ctx.sandbox, op.path))


def _move(ctx: SandboxContext, op: MoveOp) -> MoveResult:
    return MoveResult(entry=move(ctx.backend, ctx.sandbox, op.source, op.destination))


def _tar_upload(ctx: SandboxContext, op: TarUploadOp) -> TarUploadResult:
    return TarUploadResult(files=put_tar(ctx.backend, ctx.sandbox, op.path, op.data_b64))


def _tar_download(ctx: SandboxContext, op: TarDownloadOp) -> TarDownloadResult:
    return TarDownloadResult(data_b64=get_tar(ctx.backend, ctx.sandbox, op.path))


HANDLERS = (
    SandboxHandler(WriteOp, _write, mutates=True),
    SandboxHandler(ReadOp, _read),
    SandboxHandler(ListOp, _list),
    SandboxHandler(DeleteOp, _delete, mutates=True),
    SandboxHandler(StatOp, _stat),
    SandboxHandler(MkdirOp, _mkdir, mutates=True),
    SandboxHandler(MoveOp, _move, mutates=True),
    SandboxHandler(TarUploadOp, _tar_upload, mutates=True),
    SandboxHandler(TarDownloadOp, _tar_download),
)
"""The file family's handlers."""
