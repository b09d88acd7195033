"""The fake worker's lifecycle ops: checkpoints as copies of its in-memory files.

Enough for the API's unit tests (routes, errors, schemas); the real ops are
tested against a real grid (tests/integration/test_lifecycle_grid.py).
"""

from __future__ import annotations

from sandgrid.errors import Conflict, ErrorCode, LimitExceeded, NotFound
from sandgrid.lifecycle import (
    MAX_CHECKPOINTS,
    CheckpointInfo,
    CheckpointList,
    PauseResult,
    RestoreResult,
)
from sandgrid.ops.lifecycle import (
    CheckpointOp,
    DropCheckpointOp,
    DropCheckpointResult,
    ListCheckpointsOp,
    PauseOp,
    RestoreOp,
)
from sandgrid.wire.jobs import TurnJob, TurnResult

__all__ = ["FakeCheckpoints"]


class FakeCheckpoints:
    """Checkpoints of the fake worker's files: ``(session, name) -> {path: content}``."""

    def __init__(self, files: dict[tuple[str, str], str]) -> None:
        self.files = files
        self.kept: dict[tuple[str, str], dict[str, str]] = {}

    def apply(self, job: TurnJob) -> TurnResult:
        op, sid = job.op, job.session.id
        if isinstance(op, ListCheckpointsOp):
            names = sorted(n for s, n in self.kept if s == sid)
            return CheckpointList(
                checkpoints=[CheckpointInfo(name=n, snapshot=f"ck-{n}") for n in names]
            )
        if isinstance(op, CheckpointOp):
            if (sid, op.name) in self.kept:
                raise Conflict(
                    "exists", code=ErrorCode.CHECKPOINT_EXISTS, context={"field": "name"}
                )
            if sum(s == sid for s, _ in self.kept) >= MAX_CHECKPOINTS:
                raise LimitExceeded("too many", context={"max": MAX_CHECKPOINTS})
            self.kept[(sid, op.name)] = {p: c for (s, p), c in self.files.items() if s == sid}
            return CheckpointInfo(name=op.name, snapshot=f"ck-{op.name}")
        if isinstance(op, DropCheckpointOp | RestoreOp):
            name = op.name if isinstance(op, DropCheckpointOp) else op.checkpoint
            if (sid, name) not in self.kept:
                raise NotFound(f"no checkpoint {name!r}", operation="checkpoints")
            if isinstance(op, DropCheckpointOp):
                del self.kept[(sid, name)]
                return DropCheckpointResult(deleted=name)
            for key in [k for k in self.files if k[0] == sid]:
                del self.files[key]
            self.files.update({(sid, p): c for p, c in self.kept[(sid, name)].items()})
            return RestoreResult(session=sid, checkpoint=name, snapshot=f"ck-{name}")
        assert isinstance(op, PauseOp)
        return PauseResult(session=sid, snapshot=job.session.snapshot, released=True)
