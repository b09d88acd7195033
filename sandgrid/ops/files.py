"""The file ops of a session's workspace: write, read, list, stat, delete, mkdir, move,
tar upload and download.

Read and list answer the public ``FileRead`` and ``FileList`` of
``sandgrid.models``; the others' results are defined here. The routes answer
those as the bare objects they always were (``{"written": 2}``): no ``v``, and
``saved``/``saved_error`` only when the snapshot after the op failed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models import MAX_FILE_BYTES, FileEntry, FileWrite, WireModel, WorkspacePath
from sandgrid.ops.saved import SavedResult

__all__ = [
    "DeleteOp",
    "DeleteResult",
    "ListOp",
    "MkdirOp",
    "MkdirResult",
    "MoveOp",
    "MoveResult",
    "ReadOp",
    "StatOp",
    "StatResult",
    "TarDownloadOp",
    "TarDownloadResult",
    "TarUploadOp",
    "TarUploadResult",
    "WriteOp",
    "WriteResult",
]


class WriteOp(WireModel):
    """Write files in the workspace (also the body of ``POST .../files``)."""

    kind: Literal["write"] = "write"
    files: list[FileWrite] = Field(min_length=1, max_length=1024)


class WriteResult(SavedResult):
    """How many files were written."""

    kind: Literal["write"] = Field("write", exclude=True, repr=False)
    written: int


class ReadOp(WireModel):
    """Read one file; answers ``FileRead``."""

    kind: Literal["read"] = "read"
    path: WorkspacePath
    encoding: Literal["utf-8", "base64"] = "utf-8"


class ListOp(WireModel):
    """List a directory; answers ``FileList``."""

    kind: Literal["list"] = "list"
    path: WorkspacePath = "."
    recursive: bool = False


class DeleteOp(WireModel):
    """Delete a file, or a directory with ``recursive``."""

    kind: Literal["delete"] = "delete"
    path: WorkspacePath
    recursive: bool = False


class DeleteResult(SavedResult):
    """How many entries went: 1 for a file, a link or an empty directory; with
    ``recursive``, a directory's entries and itself (a missing path is ``not_found``)."""

    kind: Literal["delete"] = Field("delete", exclude=True, repr=False)
    deleted: int


class StatOp(WireModel):
    """The entry of one path (a link's own entry when ``follow`` is false)."""

    kind: Literal["stat"] = "stat"
    path: WorkspacePath
    follow: bool = True


class MkdirOp(WireModel):
    """Make a directory and its parents."""

    kind: Literal["mkdir"] = "mkdir"
    path: WorkspacePath


class MoveOp(WireModel):
    """Rename an entry (a link moves as a link); parents of ``destination`` made."""

    kind: Literal["move"] = "move"
    source: WorkspacePath
    destination: WorkspacePath


class StatResult(WireModel):
    """The entry; a missing path is ``not_found``."""

    kind: Literal["stat"] = Field("stat", exclude=True, repr=False)
    entry: FileEntry


class MoveResult(SavedResult, StatResult):
    """The entry at its new path (``entry``); a missing source is ``not_found``."""

    kind: Literal["move"] = Field("move", exclude=True, repr=False)  # type: ignore[assignment]


class MkdirResult(SavedResult):
    """Whether it was made (False: a directory was there already)."""

    kind: Literal["mkdir"] = Field("mkdir", exclude=True, repr=False)
    created: bool


class TarUploadOp(WireModel):
    """Unpack a tar archive (base64 in the JSON message) into a workspace directory."""

    kind: Literal["tar_upload"] = "tar_upload"
    path: WorkspacePath = "."
    data_b64: str = Field(max_length=MAX_FILE_BYTES * 4)


class TarUploadResult(SavedResult):
    """How many files the archive held."""

    kind: Literal["tar_upload"] = Field("tar_upload", exclude=True, repr=False)
    files: int


class TarDownloadOp(WireModel):
    """A tar archive of a workspace directory, paths relative to it."""

    kind: Literal["tar_download"] = "tar_download"
    path: WorkspacePath = "."


class TarDownloadResult(WireModel):
    """The archive, base64 in the JSON result (the route answers the raw bytes)."""

    kind: Literal["tar_download"] = Field("tar_download", exclude=True, repr=False)
    data_b64: str
