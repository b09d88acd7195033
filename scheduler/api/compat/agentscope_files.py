"""AgentScope Runtime's workspace file routes: ``/proxy/{identity}/workspace/...``.

agentscope-runtime's ``sandbox.fs`` (``SandboxManager.fs_*`` in remote mode)
sends these to the manager, which would proxy them to the runtime inside the
container. Here they are turns of the session: ``file`` (read, write),
``files:batch``, ``list``, ``entry`` (delete), ``exists`` (stat), ``move`` and
``mkdir`` map onto the grid's file ops, which resolve every path beneath
``/workspace`` in the sandbox (no symlink followed out: 422
``path_outside_workspace``). Paths are the runtime's (absolute under
``/workspace``, or relative to it) and are checked by ``models.workspace_path``
before any turn: a path leaving the workspace is 422 ``path_outside_workspace``.
Status codes are the runtime's: a missing file, a directory read as a file, a
missing or non-directory listing, a missing move source are 404; writing over a
directory and making a directory where a file is are 409; removing a missing
path is 204. Errors carry the runtime's ``{"detail": ...}`` beside the grid's
``error`` object (``scheduler.api.compat.agentscope_errors``). The agent
reports the OS errors behind them as ``invalid_input``, so the route stats the
path once an op has failed to tell them apart. Answers have the runtime's
shapes (entries with absolute ``path``, ``name``, ``type``, ``size``,
``mtime_ms``).
"""

from __future__ import annotations

import base64
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, Query, Request, Response, UploadFile
from fastapi.responses import PlainTextResponse
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from sandgrid.errors import Conflict, ErrorCode, InvalidInput, NotFound
from sandgrid.models import (
    MAX_FILE_BYTES,
    FileEntry,
    FileList,
    FileRead,
    FileWrite,
    workspace_path,
)
from sandgrid.ops import files as file_ops
from sandgrid.ops.files import DeleteOp, DeleteResult, ListOp, ReadOp, WriteOp, WriteResult
from scheduler.api.compat.agentscope_answers import fs_entry
from scheduler.api.compat.agentscope_errors import RuntimeErrorRoute
from scheduler.api.compat.agentscope_models import MoveBody, PathBody
from scheduler.api.deps import CurrentTenant, Services, Svc
from scheduler.tenants import Tenant

__all__ = [
    "MAX_BATCH_FILES",
    "batch_write",
    "exists",
    "list_dir",
    "mkdir",
    "move",
    "read_file",
    "remove",
    "router",
    "write_file",
]

router = APIRouter(
    prefix="/proxy/{identity}/workspace", tags=["agentscope"], route_class=RuntimeErrorRoute
)

#: Most files one ``files:batch`` call may write (the grid's write op takes as many).
MAX_BATCH_FILES = 1024

_Path = Annotated[str, AfterValidator(workspace_path), Query(description="a workspace path")]


@router.get("/file", response_model=None)
def read_file(
    identity: str,
    path: _Path,
    svc: Svc,
    tenant: CurrentTenant,
    fmt: Annotated[Literal["text", "bytes"], Query(alias="format")] = "text",
) -> Response:
    """A file's content: text as ``text/plain``, bytes as ``application/octet-stream``."""
    encoding: Literal["utf-8", "base64"] = "utf-8" if fmt == "text" else "base64"
    try:
        read = svc.runner.op(tenant, identity, ReadOp(path=path, encoding=encoding), FileRead)
    except NotFound as exc:  # a missing path (the agent's errno), in the runtime's words
        if "errno" in exc.context:
            raise NotFound("not found", operation="workspace.read", context={"path": path}) from exc
        raise
    except InvalidInput as exc:  # as the runtime: a missing path or a directory is 404
        if _plain(exc) and _kind(svc, tenant, identity, path) in (None, "dir"):
            raise NotFound("not found", operation="workspace.read", context={"path": path}) from exc
        raise
    if fmt == "text":
        return PlainTextResponse(read.content)
    return Response(base64.b64decode(read.content), media_type="application/octet-stream")


@router.put("/file")
async def write_file(
    identity: str, path: _Path, request: Request, svc: Svc, tenant: CurrentTenant
) -> dict[str, Any]:
    """Write the raw request body to a file (parents made); the file's entry."""
    data = await request.body()
    await run_in_threadpool(_write, svc, tenant, identity, [(path, data)])
    return _written(path, len(data))


@router.post("/files:batch")
async def batch_write(
    identity: str,
    svc: Svc,
    tenant: CurrentTenant,
    files: Annotated[list[UploadFile], File()],
    paths: Annotated[list[str] | None, Form()] = None,
) -> list[dict[str, Any]]:
    """Write several files in one turn; targets are ``paths`` (else each file's name)."""
    if paths and len(paths) != len(files):
        raise InvalidInput(
            f"paths: {len(paths)} paths for {len(files)} files",
            operation="files:batch",
            context={"field": "paths", "rule": "as many paths as files, or none"},
        )
    if len(files) > MAX_BATCH_FILES:
        raise InvalidInput(
            f"files: {len(files)} files; at most {MAX_BATCH_FILES} per call",
            operation="files:batch",
            context={"field": "files", "rule": f"at most {MAX_BATCH_FILES} files"},
        )
    targets = paths or [f.filename or "" for f in files]
    items = [(_checked(t, "paths"), await f.read()) for t, f in zip(targets, files, strict=True)]
    await run_in_threadpool(_write, svc, tenant, identity, items)
    return [_written(p, len(d)) for p, d in items]


@router.get("/list")
def list_dir(
    identity: str,
    path: _Path,
    svc: Svc,
    tenant: CurrentTenant,
    depth: Annotated[int, Query(ge=1, le=64)] = 1,
) -> list[dict[str, Any]]:
    """Entries under a directory, ``depth`` levels deep."""
    op = ListOp(path=path, recursive=depth > 1)
    missing = NotFound("not found", operation="workspace.list", context={"path": path})
    try:
        listed = svc.runner.op(tenant, identity, op, FileList)
    except NotFound as exc:  # a missing path (the agent's errno), in the runtime's words
        if "errno" in exc.context:
            raise missing from exc
        raise
    except InvalidInput as exc:  # as the runtime: a missing path or a file is 404
        if _plain(exc) and _kind(svc, tenant, identity, path) != "dir":
            raise missing from exc
        raise
    if any(e.path == path and e.type != "dir" for e in listed.entries):
        raise missing  # the grid lists a file as its one entry; the runtime lists only dirs
    base = "" if path == "." else path + "/"
    return [
        fs_entry(e)
        for e in listed.entries
        if e.path.startswith(base) and e.path[len(base) :].count("/") < depth
    ]


@router.get("/exists")
def exists(identity: str, path: _Path, svc: Svc, tenant: CurrentTenant) -> dict[str, Any]:
    """``{"exists": bool}`` (a dangling symlink exists)."""
    svc.registry.get(tenant.name, identity)  # an unknown sandbox is 404, a missing path not
    try:
        svc.runner.op(
            tenant, identity, file_ops.StatOp(path=path, follow=False), file_ops.StatResult
        )
    except NotFound:
        return {"exists": False}
    return {"exists": True}


@router.delete("/entry", status_code=204)
def remove(identity: str, path: _Path, svc: Svc, tenant: CurrentTenant) -> Response:
    """Delete a file or a whole directory; a missing path is no error (204)."""
    if path == ".":
        raise InvalidInput(
            "path: the workspace itself cannot be removed",
            operation="entry",
            context={"field": "path", "rule": "a path under /workspace, not /workspace"},
        )
    svc.registry.get(tenant.name, identity)  # an unknown sandbox is 404, a missing path not
    try:
        svc.runner.op(tenant, identity, DeleteOp(path=path, recursive=True), DeleteResult)
    except NotFound:
        pass
    except InvalidInput as exc:
        if not _plain(exc) or _kind(svc, tenant, identity, path) is not None:
            raise
    return Response(status_code=204)


@router.post("/move")
def move(identity: str, body: MoveBody, svc: Svc, tenant: CurrentTenant) -> dict[str, Any]:
    """Move or rename an entry (parents of the destination made); its new entry."""
    src, dst = _checked(body.source, "source"), _checked(body.destination, "destination")
    svc.registry.get(tenant.name, identity)  # an unknown sandbox is 404 of its own
    op = file_ops.MoveOp(source=src, destination=dst)
    try:
        moved = svc.runner.op(tenant, identity, op, file_ops.MoveResult)
    except NotFound as exc:
        raise NotFound(
            "source not found", operation="workspace.move", context={"path": src}
        ) from exc
    return fs_entry(moved.entry)


@router.post("/mkdir")
def mkdir(identity: str, body: PathBody, svc: Svc, tenant: CurrentTenant) -> dict[str, Any]:
    """Make a directory and its parents: ``{"created": bool}``."""
    path = _checked(body.path, "path")
    try:
        made = svc.runner.op(tenant, identity, file_ops.MkdirOp(path=path), file_ops.MkdirResult)
    except InvalidInput as exc:  # as the runtime: a file (or a file parent) in the way is 409
        if _plain(exc) and _kind(svc, tenant, identity, path) not in (None, "dir"):
            raise Conflict(
                "path exists and is not a directory",
                code=ErrorCode.INVALID_INPUT,
                operation="workspace.mkdir",
                context={"path": path},
            ) from exc
        raise
    return {"created": made.created}


def _checked(raw: str, field: str) -> str:
    """A workspace path from a body field, or 422 naming the field."""
    try:
        return workspace_path(raw)
    except ValueError as exc:
        raise InvalidInput(
            f"{field}: {exc}",
            operation="workspace",
            context={"field": field, "rule": str(exc)},
        ) from exc


def _write(svc: Services, tenant: Tenant, identity: str, items: list[tuple[str, bytes]]) -> None:
    for path, data in items:
        if len(data) > MAX_FILE_BYTES:
            raise InvalidInput(
                f"content of {path}: {len(data)} bytes; at most {MAX_FILE_BYTES} bytes a file",
                operation="workspace.write",
                context={"field": "content", "rule": f"at most {MAX_FILE_BYTES} bytes a file"},
            )
    files = [
        FileWrite(path=p, content=base64.b64encode(d).decode(), encoding="base64") for p, d in items
    ]
    try:
        svc.runner.op(tenant, identity, WriteOp(files=files), WriteResult)
    except InvalidInput as exc:  # as the runtime: writing over a directory is 409
        if _plain(exc):
            for path, _ in items:
                if _kind(svc, tenant, identity, path) == "dir":
                    raise Conflict(
                        f"path exists and is a directory: {path}",
                        code=ErrorCode.INVALID_INPUT,
                        operation="workspace.write",
                        context={"path": path},
                    ) from exc
        raise


def _plain(exc: InvalidInput) -> bool:
    """A bare ``invalid_input`` from the agent (an OS error), not a refused path or size."""
    return exc.code == ErrorCode.INVALID_INPUT


def _kind(svc: Services, tenant: Tenant, identity: str, path: str) -> str | None:
    """What is at ``path`` (``file``, ``dir``...), following a link as the runtime's
    ``os.path`` checks do; None when nothing is. Asked only once an op has failed,
    to answer with the runtime's status for that failure."""
    op = file_ops.StatOp(path=path, follow=True)
    try:
        return svc.runner.op(tenant, identity, op, file_ops.StatResult).entry.type
    except NotFound:
        return None


def _written(path: str, size: int) -> dict[str, Any]:
    """The entry of a file just written (the write op reports no stat of its own)."""
    entry = FileEntry(path=path, type="file", size=size, mtime=time.time())
    return fs_entry(entry)
