"""The requests of the API's file and tar routes: one builder a call (see ``_requests``).

Pure: no I/O. Bytes travel base64-encoded, text as UTF-8.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from sandgrid.client._call import Call, FileContent, model, parse_answer, parse_json
from sandgrid.models import FileEntry, FileList, FileRead, FileWrite

__all__ = [
    "delete_file",
    "download_tar",
    "file_write",
    "list_files",
    "read_file",
    "upload_tar",
    "write_file",
    "write_files",
]


def file_write(path: str, content: FileContent, mode: int) -> FileWrite:
    """One file to write, its bytes base64-encoded."""
    if isinstance(content, bytes):
        encoded = base64.b64encode(content).decode()
        return model(FileWrite, path=path, content=encoded, encoding="base64", mode=mode)
    return model(FileWrite, path=path, content=content, encoding="utf-8", mode=mode)


def _read(binary: bool) -> Callable[[httpx.Response], FileContent]:
    def parse(r: httpx.Response) -> FileContent:
        read = parse_answer(FileRead, r.content)
        if read.encoding == "base64":
            raw = base64.b64decode(read.content)
            return raw if binary else raw.decode()
        return read.content.encode() if binary else read.content

    return parse


def _flag(value: bool) -> str:
    return "true" if value else "false"


def write_files(
    session_id: str, files: Mapping[str, FileContent], *, mode: int = 0o644
) -> Call[dict[str, Any]]:
    """Write files (text, or bytes) into the workspace."""
    writes = [file_write(p, c, mode).model_dump(mode="json") for p, c in files.items()]
    return Call("POST", f"/v1/sessions/{session_id}/files", parse_json, json={"files": writes})


def write_file(
    session_id: str, path: str, content: FileContent, *, mode: int = 0o644
) -> Call[dict[str, Any]]:
    """Write one file (text, or bytes) into the workspace."""
    return write_files(session_id, {path: content}, mode=mode)


def read_file(session_id: str, path: str, *, binary: bool = False) -> Call[FileContent]:
    """A file's content: text, or bytes with ``binary=True``."""
    params = {"path": path, "encoding": "base64" if binary else "utf-8"}
    return Call("GET", f"/v1/sessions/{session_id}/files", _read(binary), params=params)


def list_files(
    session_id: str, path: str = ".", *, recursive: bool = False
) -> Call[list[FileEntry]]:
    """The entries of a directory of the workspace (all below it with ``recursive``)."""
    params = {"path": path, "recursive": _flag(recursive)}
    parse: Callable[[httpx.Response], list[FileEntry]] = lambda r: (  # noqa: E731
        parse_answer(FileList, r.content).entries
    )
    return Call("GET", f"/v1/sessions/{session_id}/files/list", parse, params=params)


def delete_file(session_id: str, path: str, *, recursive: bool = False) -> Call[dict[str, Any]]:
    """Delete a file (or a directory with ``recursive=True``) in the workspace."""
    params = {"path": path, "recursive": _flag(recursive)}
    return Call("DELETE", f"/v1/sessions/{session_id}/files", parse_json, params=params)


def upload_tar(session_id: str, data: bytes, path: str = ".") -> Call[dict[str, Any]]:
    """Unpack a tar archive into the workspace at ``path``."""
    return Call(
        "PUT",
        f"/v1/sessions/{session_id}/tar",
        parse_json,
        params={"path": path},
        content=data,
        headers={"Content-Type": "application/x-tar"},
    )


def download_tar(session_id: str, path: str = ".") -> Call[bytes]:
    """A tar archive of ``path`` in the workspace."""
    params = {"path": path}
    return Call("GET", f"/v1/sessions/{session_id}/tar", lambda r: r.content, params=params)
