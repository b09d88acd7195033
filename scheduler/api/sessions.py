"""Routes of sessions and turns: create, list, get, close, exec.

Handlers are thin and synchronous: FastAPI runs them on its thread pool, where
the turn flow (``scheduler.turns``) sends the job and blocks on its outcome.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from scheduler.api.deps import CurrentTenant, Svc
from scheduler.errors import InvalidInput, SandgridError
from scheduler.models import (
    ExecRequest,
    ExecResult,
    SessionCreate,
    SessionInfo,
    SessionList,
    WriteOp,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=SessionInfo)
def create_session(spec: SessionCreate, svc: Svc, tenant: CurrentTenant) -> SessionInfo:
    """Create a session. No container starts until its first turn (or ``files``)."""
    svc.admission.check_session(tenant, spec)
    snapshot = None
    if spec.fork_from:
        source = svc.registry.get(tenant.name, spec.fork_from)
        if source.type != spec.type or not source.snapshot:
            raise InvalidInput(
                f"fork_from: session {source.id!r} has no snapshot of type {spec.type!r} to fork",
                operation="sessions.create",
                context={
                    "field": "fork_from",
                    "rule": "a session of the same type with a snapshot",
                },
            )
        snapshot = source.snapshot
    info = svc.registry.create(
        tenant.name, spec, snapshot=snapshot, max_sessions=tenant.limits.max_sessions
    )
    if spec.files:
        try:
            svc.runner.run(tenant, info, WriteOp(files=spec.files), timeout_s=None)
        except SandgridError:
            svc.registry.close(info.id)
            raise
        info = svc.registry.get(tenant.name, info.id)
    return info


@router.get("", response_model=SessionList)
def list_sessions(svc: Svc, tenant: CurrentTenant) -> SessionList:
    """The caller's sessions that are not closed."""
    return SessionList(sessions=svc.registry.list(tenant.name))


@router.get("/{session_id}", response_model=SessionInfo)
def get_session(session_id: str, svc: Svc, tenant: CurrentTenant) -> SessionInfo:
    """One session; another tenant's id is 404, exactly like an unknown one."""
    return svc.registry.get(tenant.name, session_id)


@router.delete("/{session_id}", response_model=SessionInfo)
def close_session(session_id: str, svc: Svc, tenant: CurrentTenant) -> SessionInfo:
    """Close a session (409 while a turn runs); its container is destroyed."""
    return svc.runner.close(tenant, session_id)


@router.post("/{session_id}/exec", response_model=ExecResult)
def exec_turn(
    session_id: str, body: ExecRequest, request: Request, svc: Svc, tenant: CurrentTenant
) -> ExecResult:
    """Run one command. A second concurrent turn on the session gets 409 session_busy."""
    return svc.runner.exec(tenant, session_id, body, t0=request.state.t0)
