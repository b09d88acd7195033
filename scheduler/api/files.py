"""Routes of workspace files: write, read, list, delete, tar upload and download.

Paths are validated here (``models.workspace_path``): a path leaving
``/workspace`` is 422 ``path_outside_workspace`` before any turn is queued.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request, Response
from pydantic import AfterValidator

from sandgrid.errors import SandboxError
from sandgrid.models import FileList, FileRead, workspace_path
from sandgrid.ops import files as ops
from sandgrid.ops.saved import bare_body
from scheduler.api.deps import CurrentTenant, Svc

__all__ = [
    "TAR",
    "delete_file",
    "download_tar",
    "list_files",
    "read_file",
    "router",
    "upload_tar",
    "write_files",
]

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["files"])

_PathQ = Annotated[str, AfterValidator(workspace_path), Query(description="path under /workspace")]
_RootQ = Annotated[
    str, AfterValidator(workspace_path), Query(description="directory under /workspace")
]
TAR = "application/x-tar"


@router.post("/files")
def write_files(
    session_id: str, body: ops.WriteOp, request: Request, svc: Svc, tenant: CurrentTenant
) -> dict[str, Any]:
    """Write files (``{"files": [{"path", "content", "encoding", "mode"}]}``)."""
    return bare_body(svc.runner.op(tenant, session_id, body, ops.WriteResult, t0=request.state.t0))


@router.get("/files", response_model=FileRead)
def read_file(
    session_id: str,
    path: _PathQ,
    svc: Svc,
    tenant: CurrentTenant,
    encoding: Literal["utf-8", "base64"] = "utf-8",
) -> FileRead:
    """Read one file; ``encoding=base64`` for binary content."""
    return svc.runner.op(tenant, session_id, ops.ReadOp(path=path, encoding=encoding), FileRead)


@router.get("/files/list", response_model=FileList)
def list_files(
    session_id: str, svc: Svc, tenant: CurrentTenant, path: _RootQ = ".", recursive: bool = False
) -> FileList:
    """List a directory of the workspace."""
    return svc.runner.op(tenant, session_id, ops.ListOp(path=path, recursive=recursive), FileList)


@router.delete("/files")
def delete_file(
    session_id: str, path: _PathQ, svc: Svc, tenant: CurrentTenant, recursive: bool = False
) -> dict[str, Any]:
    """Delete a file, or a directory with ``recursive=true``."""
    op = ops.DeleteOp(path=path, recursive=recursive)
    return bare_body(svc.runner.op(tenant, session_id, op, ops.DeleteResult))


@router.put("/tar")
def upload_tar(
    session_id: str,
    data: Annotated[bytes, Body(media_type=TAR)],
    svc: Svc,
    tenant: CurrentTenant,
    path: _RootQ = ".",
) -> dict[str, Any]:
    """Unpack a tar archive (the raw request body) into a workspace directory."""
    op = ops.TarUploadOp(path=path, data_b64=base64.b64encode(data).decode())
    return bare_body(svc.runner.op(tenant, session_id, op, ops.TarUploadResult))


@router.get("/tar", response_class=Response, responses={200: {"content": {TAR: {}}}})
def download_tar(session_id: str, svc: Svc, tenant: CurrentTenant, path: _RootQ = ".") -> Response:
    """A tar archive of a workspace directory, paths relative to it."""
    result = svc.runner.op(tenant, session_id, ops.TarDownloadOp(path=path), ops.TarDownloadResult)
    try:
        data = base64.b64decode(result.data_b64, validate=True)
    except ValueError as exc:  # binascii.Error
        raise SandboxError("the worker returned no tar data", operation="tar_download") from exc
    return Response(content=data, media_type=TAR)
