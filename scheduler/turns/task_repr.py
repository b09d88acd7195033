"""What Flower and the logs show of a turn: ids, op kinds and sizes, never a value.

Celery shows a task's arguments in Flower and in its logs; the ``TurnJob`` of a
turn holds commands, file contents, stdin, environment values and the session's
env, which must not be on display. ``describe`` is sent as the message's
``argsrepr`` instead (``scheduler.turns.dispatch``): the turn, the session, its
tenant and type, the op's kind and the sizes of what it carries (a command's
length, the count and bytes of files, the count of env keys), never a command,
a path, a content or a value (issue 23, item 5; the audit trail keeps a
command's digest and head, ``scheduler.audit``).
"""

from __future__ import annotations

from sandgrid.models import ExecRequest
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import WriteOp
from sandgrid.wire.jobs import TurnJob

__all__ = ["describe"]


def _command(req: ExecRequest) -> str:
    if req.argv is not None:
        return f"argv=({len(req.argv)} words, {len(' '.join(req.argv))} chars)"
    if req.shell is not None:
        return f"shell=({len(req.shell)} chars)"
    return f"python=({len(req.python or '')} chars)"


def _op(job: TurnJob) -> str:
    op = job.op
    if isinstance(op, ExecOp):
        extra = f" env={len(op.request.env)} keys" if op.request.env else ""
        stdin = f" stdin=({len(op.request.stdin)} chars)" if op.request.stdin else ""
        return f"op=exec {_command(op.request)}{extra}{stdin}"
    if isinstance(op, WriteOp):
        size = sum(len(f.content) for f in op.files)
        return f"op=write files={len(op.files)} ({size} chars)"
    return f"op={op.kind}"


def describe(job: TurnJob) -> str:
    """``turn=t-… session=s-… tenant=acme type=python op=exec shell=(2 chars) attempt=1``."""
    flags = " batch" if job.batch else ""
    flags += " close_after" if job.close_after else ""
    return (
        f"turn={job.turn_id} session={job.session.id} tenant={job.session.tenant} "
        f"type={job.session.type} {_op(job)} attempt={job.attempt}{flags}"
    )
