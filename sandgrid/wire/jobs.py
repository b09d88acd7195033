"""The Celery message of one turn and its result: what the control plane asks of a worker.

A ``TurnJob`` carries the session record and one operation (``TurnOp``, the
``kind``-tagged union of the request models of ``sandgrid.ops``); the worker
answers a ``TurnOutcome``: a result (``TurnResult``, the union of their result
models) or an error body, never both. Both are JSON on the wire (never pickle)
and frozen like every wire model.

A result's ``kind`` is excluded from the models' own dumps, so that the public
HTTP bodies stay what they were; ``TurnOutcome`` writes it into the Celery
result, and the union is parsed by it where the result enters the scheduler
(``scheduler.dispatch``). From there the result travels typed: a caller takes
the model it expects with ``expect``.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import Field, SerializerFunctionWrapHandler, field_serializer

from sandgrid.errors import SandboxError
from sandgrid.lifecycle import (
    CheckpointInfo,
    CheckpointList,
    ForkSessionsResult,
    PauseResult,
    RestoreResult,
)
from sandgrid.models import CodeResult, ExecResult, FileList, FileRead, SessionInfo, WireModel
from sandgrid.ops import code, files, lifecycle, processes, session, terminal
from sandgrid.ops.exec import ExecOp
from sandgrid.processes import ProcessInfo, ProcessList, ProcessLogs

__all__ = ["TurnJob", "TurnOp", "TurnOutcome", "TurnResult", "expect"]

R = TypeVar("R", bound=WireModel)

TurnOp = Annotated[
    ExecOp
    | files.WriteOp
    | files.ReadOp
    | files.ListOp
    | files.DeleteOp
    | files.StatOp
    | files.MkdirOp
    | files.MoveOp
    | files.TarUploadOp
    | files.TarDownloadOp
    | session.CloseOp
    | session.ForkOp
    | code.RunCodeOp
    | terminal.PtyOp
    | lifecycle.CheckpointOp
    | lifecycle.ListCheckpointsOp
    | lifecycle.DropCheckpointOp
    | lifecycle.RestoreOp
    | lifecycle.PauseOp
    | lifecycle.ForkSessionsOp
    | processes.ProcStartOp
    | processes.ProcOp,
    Field(discriminator="kind"),
]
"""What a worker is asked to do for a session: one request of ``sandgrid.ops``."""

TurnResult = Annotated[
    ExecResult
    | files.WriteResult
    | FileRead
    | FileList
    | files.DeleteResult
    | files.StatResult
    | files.MkdirResult
    | files.MoveResult
    | files.TarUploadResult
    | files.TarDownloadResult
    | session.CloseResult
    | session.ForkResult
    | CodeResult
    | terminal.PtyResult
    | CheckpointInfo
    | CheckpointList
    | lifecycle.DropCheckpointResult
    | RestoreResult
    | PauseResult
    | ForkSessionsResult
    | ProcessInfo
    | ProcessList
    | ProcessLogs
    | processes.StdinResult,
    Field(discriminator="kind"),
]
"""What a worker answers for a turn that succeeded: one result model, tagged by ``kind``."""


class TurnJob(WireModel):
    """The Celery message of one turn: everything a worker needs, nothing secret."""

    turn_id: str
    attempt: int = 1
    session: SessionInfo
    op: TurnOp
    batch: bool = False
    close_after: bool = Field(
        False,
        description="destroy the session's sandbox right after this turn, without a "
        "snapshot: a batch job's one-turn session (the scheduler closes the record)",
    )


class TurnOutcome(WireModel):
    """The Celery result of one turn: a result, or an error body, never both."""

    turn_id: str
    node: str
    ok: bool
    result: TurnResult | None = None
    error: dict[str, Any] | None = None
    snapshot: str | None = None
    timings: dict[str, float] = Field(default_factory=dict)

    @field_serializer("result", mode="wrap")
    def _tagged(self, result: TurnResult | None, dump: SerializerFunctionWrapHandler) -> Any:
        """The result with its ``kind``, which its own dump leaves out (see the module doc)."""
        body = dump(result)
        if result is None:
            return body
        return {"kind": result.kind, **body}


def expect(outcome: TurnOutcome, model: type[R], operation: str) -> R:
    """The result of a successful turn, which must be a ``model``.

    Raises:
        SandboxError: the worker answered no result, or one of another kind (a
            worker of another version, or a bug): named, never a 500 with a
            ``KeyError``.
    """
    result = outcome.result
    if isinstance(result, model):
        return result
    got = "no result" if result is None else f"a {type(result).__name__} ({result.kind})"
    raise SandboxError(
        f"the {operation} turn answered {got}, not a {model.__name__}",
        operation=operation,
        context={"turn": outcome.turn_id, "node": outcome.node},
    )
