"""What Flower shows of a turn: a one-line summary, never contents or secrets.

Celery shows a task's arguments in Flower and in its logs; the ``TurnJob`` of a
turn holds file contents, stdin, environment values and the session's env,
which must not be on display. ``describe`` is sent as the message's
``argsrepr`` instead (``scheduler.turns.dispatch``): the session, the op and a short,
length-stamped head of the command, file paths and counts, never a value.
"""

from __future__ import annotations

from sandgrid.models import ExecRequest
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import DeleteOp, ListOp, ReadOp, TarDownloadOp, TarUploadOp, WriteOp
from sandgrid.wire.jobs import TurnJob

__all__ = ["HEAD_CHARS", "describe"]

#: Characters of a command shown (the length is always shown).
HEAD_CHARS = 40


def _head(text: str) -> str:
    short = text if len(text) <= HEAD_CHARS else text[: HEAD_CHARS - 1] + "…"
    return f"{short!r} ({len(text)} chars)"


def _command(req: ExecRequest) -> str:
    if req.argv is not None:
        return f"argv={_head(' '.join(req.argv))}"
    if req.shell is not None:
        return f"shell={_head(req.shell)}"
    return f"python={_head(req.python or '')}"


def _op(job: TurnJob) -> str:
    op = job.op
    if isinstance(op, ExecOp):
        extra = f" env={len(op.request.env)} keys" if op.request.env else ""
        stdin = f" stdin=({len(op.request.stdin)} chars)" if op.request.stdin else ""
        return f"op=exec {_command(op.request)}{extra}{stdin}"
    if isinstance(op, WriteOp):
        paths = ", ".join(f.path for f in op.files[:3]) + (" …" if len(op.files) > 3 else "")
        return f"op=write files={len(op.files)} [{paths}]"
    if isinstance(op, ReadOp | ListOp | DeleteOp | TarUploadOp | TarDownloadOp):
        return f"op={op.kind} path={op.path!r}"
    return f"op={op.kind}"


def describe(job: TurnJob) -> str:
    """``session=s-… type=python op=exec shell='ls' (2 chars) attempt=1 [batch]``."""
    flags = " batch" if job.batch else ""
    flags += " close_after" if job.close_after else ""
    return (
        f"turn={job.turn_id} session={job.session.id} tenant={job.session.tenant} "
        f"type={job.session.type} {_op(job)} attempt={job.attempt}{flags}"
    )
