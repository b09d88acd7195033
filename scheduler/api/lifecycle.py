"""Routes of a session's lifecycle: checkpoints, restore, pause; listing filters; TTLs.

Each op is one turn of the session (``TurnRunner.run``, under its turn lock):
on its owner while the lease lives, else on any worker of its type
(``worker.ops.lifecycle``). See docs/lifecycle.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Request, status

from sandgrid.errors import InvalidInput
from sandgrid.lifecycle import (
    CheckpointCreate,
    CheckpointInfo,
    CheckpointList,
    CheckpointName,
    PauseRequest,
    PauseResult,
    RestoreRequest,
    RestoreResult,
)
from sandgrid.models import SessionInfo, WireModel
from sandgrid.ops.lifecycle import (
    CheckpointOp,
    DropCheckpointOp,
    DropCheckpointResult,
    ListCheckpointsOp,
    PauseOp,
    RestoreOp,
)
from sandgrid.wire.catalog import get_type
from sandgrid.wire.jobs import TurnOp, expect
from scheduler.api.deps import CurrentTenant, Services, Svc
from scheduler.expiry import Expiry, shown
from scheduler.tenants import Tenant

__all__ = [
    "MEMORY_RUNTIME",
    "ExpiryDep",
    "check_memory_runtime",
    "create_checkpoint",
    "delete_checkpoint",
    "filter_sessions",
    "get_expiry",
    "list_checkpoints",
    "pause_session",
    "restore_checkpoint",
    "router",
]

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["lifecycle"])

MEMORY_RUNTIME = "runsc"
"""The runtime whose sandboxes a pause with memory can checkpoint (gVisor)."""

R = TypeVar("R", bound=WireModel)


def get_expiry(request: Request) -> Expiry:
    """The API process's ``Expiry`` (built by ``create_app``)."""
    expiry: Expiry = request.app.state.expiry
    return expiry


ExpiryDep = Annotated[Expiry, Depends(get_expiry)]


def _turn(svc: Services, tenant: Tenant, session_id: str, op: TurnOp, model: type[R]) -> R:
    session = svc.registry.get(tenant.name, session_id)
    return expect(svc.runner.run(tenant, session, op, timeout_s=None).outcome, model, op.kind)


@router.post("/checkpoints", status_code=status.HTTP_201_CREATED, response_model=CheckpointInfo)
def create_checkpoint(
    session_id: str, body: CheckpointCreate, svc: Svc, tenant: CurrentTenant
) -> CheckpointInfo:
    """Save the workspace now and keep it under ``name`` until it is deleted.

    409 ``checkpoint_exists`` for a name in use, ``no_snapshot`` when nothing
    was saved yet; 429 ``tenant_limit`` past ``MAX_CHECKPOINTS``. With
    ``memory`` (gVisor types, 24.3) the running processes are kept with it
    (422 on a runc type, 409 ``memory_unsavable``); a restore brings them back.
    """
    if body.memory:
        check_memory_runtime(svc.registry.get(tenant.name, session_id).type)
    op = CheckpointOp(name=body.name, memory=body.memory)
    return _turn(svc, tenant, session_id, op, CheckpointInfo)


@router.get("/checkpoints", response_model=CheckpointList)
def list_checkpoints(session_id: str, svc: Svc, tenant: CurrentTenant) -> CheckpointList:
    """The session's checkpoints, by name."""
    return _turn(svc, tenant, session_id, ListCheckpointsOp(), CheckpointList)


@router.delete("/checkpoints/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_checkpoint(
    session_id: str, name: CheckpointName, svc: Svc, tenant: CurrentTenant
) -> None:
    """Delete a checkpoint (404 if there is none of that name)."""
    _turn(svc, tenant, session_id, DropCheckpointOp(name=name), DropCheckpointResult)


@router.post("/restore", response_model=RestoreResult)
def restore_checkpoint(
    session_id: str, body: RestoreRequest, svc: Svc, tenant: CurrentTenant
) -> RestoreResult:
    """Roll the workspace back to a checkpoint: the next turn sees it (changes since are gone)."""
    return _turn(svc, tenant, session_id, RestoreOp(checkpoint=body.checkpoint), RestoreResult)


@router.post("/pause", response_model=PauseResult)
def pause_session(
    session_id: str, svc: Svc, tenant: CurrentTenant, body: PauseRequest | None = None
) -> PauseResult:
    """Save the workspace and give the sandbox up; the next turn resumes on any worker.

    ``{"memory": true}`` (gVisor types; docs/memory.md) saves the running
    processes too: 422 on a runc type, 409 ``memory_unsavable`` naming what
    cannot be saved (the session goes on untouched). A session that holds no
    sandbox answers at once, without a turn.
    """
    memory = body is not None and body.memory
    session = svc.registry.get(tenant.name, session_id)
    if memory:
        check_memory_runtime(session.type)
    if session.owner is None and session.state != "closed":
        reason = "no sandbox is held: nothing runs to save" if memory else None
        return PauseResult(
            session=session.id, snapshot=session.snapshot, released=False, memory_reason=reason
        )
    done = svc.runner.run(tenant, session, PauseOp(memory=memory), timeout_s=None)
    return expect(done.outcome, PauseResult, "pause")


def check_memory_runtime(sandbox_type: str) -> None:
    """422 on ``memory`` for a type whose runtime cannot checkpoint (issue 24)."""
    runtime = get_type(sandbox_type).runtime
    if runtime != MEMORY_RUNTIME:
        raise InvalidInput(
            f"memory: the {sandbox_type} type runs on {runtime}, which cannot save a "
            f"sandbox's memory (only gVisor's {MEMORY_RUNTIME} can; docs/memory.md)",
            operation="pause",
            context={"field": "memory", "runtime": runtime, "rule": "gVisor types only"},
        )


def filter_sessions(
    sessions: Sequence[SessionInfo], labels: Sequence[str], state: str | None
) -> list[SessionInfo]:
    """The sessions (as shown) that carry every ``k=v`` of ``labels`` and are in ``state``.

    Raises:
        InvalidInput: a label filter that is not ``key=value``.
    """
    wanted: dict[str, str] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(
                f"label: {item!r} is not key=value",
                operation="sessions.list",
                context={"field": "label", "rule": "key=value"},
            )
        wanted[key] = value
    found = [shown(s) for s in sessions]
    return [
        s
        for s in found
        if all(s.labels.get(k) == v for k, v in wanted.items())
        and (state is None or s.state == state)
    ]
