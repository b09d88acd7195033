"""What a finished turn's audit record says: its action and its facts, from the op alone.

One function a family of ops; each keeps what identifies the action (a path, a
size, a pid, a signal, a digest and head of code) and never what it carried or
answered (file contents, stdin, output, environment values). Ops that only read
the session's state (list files, list or wait for processes, their logs, list
checkpoints) are not audited: they neither run code nor move data.
"""

from __future__ import annotations

import hashlib
import shlex
from typing import Any

from sandgrid.audit import AuditAction
from sandgrid.lifecycle import RestoreResult
from sandgrid.models import CodeResult, ExecRequest, ExecResult, FileRead
from sandgrid.ops.code import RunCodeOp
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import (
    DeleteOp,
    DeleteResult,
    ReadOp,
    TarDownloadOp,
    TarDownloadResult,
    TarUploadOp,
    WriteOp,
)
from sandgrid.ops.lifecycle import CheckpointOp, DropCheckpointOp, PauseOp, RestoreOp
from sandgrid.ops.processes import ProcOp, ProcStartOp
from sandgrid.ops.session import ForkOp
from sandgrid.wire.jobs import TurnJob, TurnOutcome

__all__ = [
    "MAX_PATHS",
    "MAX_PATH_CHARS",
    "Described",
    "code_fields",
    "command_fields",
    "describe",
]

#: Paths a record lists at most (a write of many files keeps its count beside them).
MAX_PATHS = 32
#: Characters of one path kept (a longer one is cut, its digest is the record's).
MAX_PATH_CHARS = 512

Described = tuple[AuditAction, dict[str, Any]]
"""An action and the ``AuditRecord`` fields beside the common ones."""


def command_fields(request: ExecRequest, head_chars: int) -> tuple[str, str | None]:
    """The digest of an exec's command and its first ``head_chars`` characters."""
    text = request.shell if request.shell is not None else request.python
    if text is None:
        text = shlex.join(request.argv or [])
    fields = code_fields(text, head_chars)
    return fields["command_digest"], fields["command_head"]


def code_fields(text: str, head_chars: int) -> dict[str, Any]:
    """``command_digest`` (``sha256:<hex>``) and ``command_head`` of code or a command."""
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return {"command_digest": digest, "command_head": text[:head_chars] if head_chars else None}


def describe(job: TurnJob, outcome: TurnOutcome | None, head_chars: int) -> list[Described]:
    """The records of a turn whose op is audited (none for a read-only op).

    A turn that had to restore the session's snapshot on a fresh sandbox (after
    a pause, an idle release or a lost node) is also the session's ``resume``.
    """
    result = outcome.result if outcome is not None else None
    found = _op_record(job, result, head_chars)
    if found is None:
        return []
    out = [found]
    if outcome is not None and "acquire_ms" in outcome.timings and job.session.snapshot:
        out.insert(0, ("resume", {"detail": {"snapshot": job.session.snapshot}}))
    return out


def _op_record(job: TurnJob, result: Any, head_chars: int) -> Described | None:
    op = job.op
    if isinstance(op, ExecOp | ProcStartOp):
        digest, head = command_fields(op.request, head_chars)
        fields: dict[str, Any] = {"command_digest": digest, "command_head": head}
        if isinstance(op, ProcStartOp):
            return "proc_start", fields
        if isinstance(result, ExecResult):
            fields["exit_code"] = result.exit_code
            fields["bytes"] = len(result.stdout) + len(result.stderr)
        return "exec", fields
    if isinstance(op, RunCodeOp):
        fields = code_fields(op.request.code, head_chars)
        if isinstance(result, CodeResult):
            fields["bytes"] = len(result.stdout) + len(result.stderr)
        return "run_code", fields
    if isinstance(op, ProcOp):
        return _process(op)
    return _files(op, result) or _lifecycle(op, result)


def _process(op: ProcOp) -> Described | None:
    if op.action == "kill":
        return "proc_kill", {"detail": {"pid": op.pid or 0, "signal": op.signal}}
    if op.action == "stdin":  # its size only, never what was typed
        return "proc_stdin", {
            "bytes": len(op.data.encode()),
            "detail": {"pid": op.pid or 0, "eof": op.eof},
        }
    return None


def _files(op: Any, result: Any) -> Described | None:
    if isinstance(op, WriteOp):
        paths = [f.path for f in op.files]
        written = sum(len(f.content) for f in op.files)
        return "write", {"bytes": written, "detail": {"files": len(paths), **_paths(paths)}}
    size: int | None = None
    if isinstance(op, ReadOp):
        size = result.size if isinstance(result, FileRead) else None
        return "read", {"bytes": size, "detail": _paths([op.path])}
    if isinstance(op, DeleteOp):
        detail: dict[str, Any] = {**_paths([op.path]), "recursive": op.recursive}
        if isinstance(result, DeleteResult):
            detail["deleted"] = result.deleted
        return "delete", {"detail": detail}
    if isinstance(op, TarUploadOp):
        return "tar_upload", {"bytes": len(op.data_b64) * 3 // 4, "detail": _paths([op.path])}
    if isinstance(op, TarDownloadOp):
        if isinstance(result, TarDownloadResult):
            size = len(result.data_b64) * 3 // 4
        return "tar_download", {"bytes": size, "detail": _paths([op.path])}
    return None


def _lifecycle(op: Any, result: Any) -> Described | None:
    if isinstance(op, ForkOp):
        detail: dict[str, Any] = {"source": op.source}
        if op.checkpoint:
            detail["checkpoint"] = op.checkpoint
        return "fork", {"detail": detail}
    if isinstance(op, CheckpointOp):
        return "checkpoint", {"detail": {"name": op.name}}
    if isinstance(op, DropCheckpointOp):
        return "checkpoint_drop", {"detail": {"name": op.name}}
    if isinstance(op, RestoreOp):
        detail = {"checkpoint": op.checkpoint}
        if isinstance(result, RestoreResult) and result.snapshot:
            detail["snapshot"] = result.snapshot
        return "restore", {"detail": detail}
    if isinstance(op, PauseOp):
        return "pause", {}
    return None


def _paths(paths: list[str]) -> dict[str, Any]:
    """``path`` (the first) and, for several, ``paths`` (at most ``MAX_PATHS``, each cut)."""
    cut = [p[:MAX_PATH_CHARS] for p in paths[:MAX_PATHS]]
    return {"path": cut[0]} if len(cut) == 1 else {"path": cut[0], "paths": cut}
