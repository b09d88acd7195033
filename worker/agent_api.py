"""Agent requests from wire models, and wire models from agent replies.

Pure functions (no I/O), so the whole mapping is unit-tested without Docker:
the backend base calls them around each channel round trip.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

from sandgrid.errors import ErrorCode, InvalidInput, SandboxError
from sandgrid.models import (
    ExecRequest,
    ExecResult,
    FileEntry,
    FileList,
    FileRead,
    FileWrite,
    Quotas,
    workspace_path,
)
from worker.agent.limits import ROOTS

__all__ = [
    "ARG_CHUNK",
    "SNAPSHOT_ROOTS",
    "FileRange",
    "check_path",
    "check_roots",
    "command_argv",
    "exec_fields",
    "exec_result",
    "file_list",
    "file_range",
    "file_read",
    "write_fields",
]

SNAPSHOT_ROOTS = ROOTS
"""What a snapshot holds: the agent's own roots (``worker.agent.limits.ROOTS``)."""
ARG_CHUNK = 100_000
"""Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN): longer sources are split."""

_PY_JOIN = (
    "import sys;_s=''.join(sys.argv[1:]);sys.argv=['-c'];del sys;"
    "exec(compile(_s,'<string>','exec'))"
)
_SH_JOIN = 'eval "$(printf %s "$@")"'


def _chunks(text: str) -> list[str]:
    return [text[i : i + ARG_CHUNK] for i in range(0, len(text), ARG_CHUNK)] or [""]


def command_argv(req: ExecRequest) -> list[str]:
    """The argv of a request: ``argv`` as is, ``shell`` via ``/bin/sh -c``,
    ``python`` via ``python3 -c``; sources over 100 kB travel as several
    arguments joined again in the sandbox."""
    if req.argv is not None:
        return list(req.argv)
    if req.shell is not None:
        if len(req.shell) <= ARG_CHUNK:
            return ["/bin/sh", "-c", req.shell]
        return ["/bin/sh", "-c", _SH_JOIN, "sh", *_chunks(req.shell)]
    source = req.python or ""
    if len(source) <= ARG_CHUNK:
        return ["python3", "-c", source]
    return ["python3", "-c", _PY_JOIN, *_chunks(source)]


def exec_fields(req: ExecRequest, quotas: Quotas, *, stream: bool) -> dict[str, Any]:
    """The fields of an ``exec`` request under these quotas."""
    return {
        "argv": command_argv(req),
        "env": dict(req.env),
        "cwd": req.cwd,
        "stdin": req.stdin,
        "timeout": req.timeout_s or quotas.timeout_s,
        "output_cap": quotas.output_bytes,
        "stream": stream,
    }


def exec_result(reply: dict[str, Any], *, node: str, timings: dict[str, float]) -> ExecResult:
    """The ``ExecResult`` of an agent's exec reply (unknown keys are ignored)."""
    known = {k: reply[k] for k in ExecResult.model_fields if k in reply}
    return ExecResult(**known, node=node, timings=timings)


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


def check_roots(roots: list[str], operation: str) -> list[str]:
    """Snapshot roots must be a non-empty subset of ``SNAPSHOT_ROOTS``."""
    if not roots or any(r not in SNAPSHOT_ROOTS for r in roots):
        raise InvalidInput(
            f"roots must be a non-empty subset of {list(SNAPSHOT_ROOTS)}, got {roots!r}",
            operation=operation,
            context={"field": "roots", "value": list(roots)},
        )
    return list(roots)


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


class FileRange(NamedTuple):
    """Bytes of a file from some offset (``read_range``), with the file's size and
    mtime as they were after the read: a file that changes between two reads
    shows it there."""

    data: bytes
    size: int
    mtime_ns: int


def file_range(reply: dict[str, Any]) -> FileRange:
    """The ``FileRange`` of a ``read_range`` reply.

    Raises:
        SandboxError: the reply is malformed.
    """
    try:
        size, mtime_ns = reply["size"], reply["mtime_ns"]
        if type(size) is not int or type(mtime_ns) is not int:
            raise TypeError("size and mtime_ns must be integers")
        return FileRange(base64.b64decode(reply["data_b64"], validate=True), size, mtime_ns)
    except (KeyError, TypeError, binascii.Error) as exc:
        raise SandboxError(
            f"malformed read_range reply from the agent: {exc}", operation="snapshot.read"
        ) from None
