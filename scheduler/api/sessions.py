"""Routes of sessions and turns: create, list, get, close, exec.

Handlers are thin and synchronous: FastAPI runs them on its thread pool, where
the turn flow (``scheduler.turns.runner``) sends the job and blocks on its outcome.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status

from sandgrid.errors import Conflict, ErrorCode, InvalidInput, SandgridError
from sandgrid.models import (
    IDEMPOTENCY_HEADER,
    ExecRequest,
    ExecResult,
    SessionCreate,
    SessionInfo,
    SessionList,
    SessionState,
)
from sandgrid.ops.files import WriteOp
from sandgrid.ops.session import ForkOp
from sandgrid.streaming import EVENT_STREAM
from scheduler.api import stream
from scheduler.api.deps import CurrentTenant, Services, Svc
from scheduler.api.lifecycle import ExpiryDep, filter_sessions
from scheduler.expiry import shown
from scheduler.network import effective_policy
from scheduler.tenants import Tenant
from scheduler.turns.idempotency import IDEMPOTENCY_TTL_S, check_key

__all__ = ["close_session", "create_session", "exec_turn", "get_session", "list_sessions", "router"]

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=SessionInfo)
def create_session(
    spec: SessionCreate, svc: Svc, tenant: CurrentTenant, expiry: ExpiryDep
) -> SessionInfo:
    """Create a session. No container starts until its first turn (or ``files``).

    With ``fork_from``, a worker first copies the source's latest snapshot into
    the new session (the blobs are shared), so the fork outlives its source.
    The session's record is kept in the object store before anything else, so
    that a registry that loses it can re-learn it; no record, no session.
    """
    spec = svc.admission.check_session(tenant, spec)  # with the type's default quotas
    spec = spec.model_copy(update={"network": effective_policy(tenant, spec)})
    svc.admission.check_capacity(spec.type, "sessions.create")
    source = _fork_source(svc, tenant, spec) if spec.fork_from else None
    info = svc.registry.create(
        tenant.name,
        spec,
        forked_from=source.id if source else None,
        max_sessions=tenant.limits.max_sessions,
    )
    try:
        svc.registry.save_record(info)
        if source is not None:
            fork = ForkOp(source=source.id, checkpoint=spec.checkpoint)
            svc.runner.run(tenant, info, fork, timeout_s=None)
        if spec.files:
            info = svc.registry.get(tenant.name, info.id)
            svc.runner.run(tenant, info, WriteOp(files=spec.files), timeout_s=None)
    except SandgridError:
        try:  # the new session is of no use: close it (and delete a copied snapshot)
            svc.runner.close(tenant, info.id)
        except SandgridError:
            svc.registry.close(info.id)
        with suppress(SandgridError):  # a record left open is re-learned empty, at worst
            svc.registry.close_record(tenant.name, info.id)
        raise
    if svc.audit is not None:
        svc.audit.event(tenant.name, info.id, "session_create", detail={"type": spec.type})
    expiry.track(info)
    return svc.registry.get(tenant.name, info.id)


def _fork_source(svc: Services, tenant: Tenant, spec: SessionCreate) -> SessionInfo:
    """The session to fork: the caller's own (another tenant's is 404), open, of
    the same type, with a snapshot."""
    source = svc.registry.get(tenant.name, str(spec.fork_from))
    if source.state == "closed":
        raise Conflict(
            f"fork_from: session {source.id!r} is closed and its snapshots are deleted; "
            "fork a session before closing it",
            code=ErrorCode.SESSION_CLOSED,
            operation="sessions.create",
            context={"field": "fork_from", "session": source.id},
        )
    if source.type != spec.type or not (source.snapshot or spec.checkpoint):
        why = (
            f"is of type {source.type!r}, not {spec.type!r}"
            if source.type != spec.type
            else "has no snapshot yet (no turn changed its workspace, or its policy "
            f"{source.snapshot_policy!r} has not saved it)"
        )
        raise InvalidInput(
            f"fork_from: session {source.id!r} {why}",
            operation="sessions.create",
            context={"field": "fork_from", "rule": "a session of the same type with a snapshot"},
        )
    return source


@router.get("", response_model=SessionList)
def list_sessions(
    svc: Svc,
    tenant: CurrentTenant,
    label: Annotated[
        list[str], Query(description="key=value: only sessions with this label (repeatable)")
    ] = [],  # noqa: B006 (FastAPI copies query defaults)
    state: Annotated[SessionState | None, Query(description="only sessions in this state")] = None,
) -> SessionList:
    """The caller's sessions that are not closed, filtered by labels (all must match) and state."""
    return SessionList(sessions=filter_sessions(svc.registry.list(tenant.name), label, state))


@router.get("/{session_id}", response_model=SessionInfo)
def get_session(session_id: str, svc: Svc, tenant: CurrentTenant, expiry: ExpiryDep) -> SessionInfo:
    """One session; another tenant's id is 404, exactly like an unknown one. One past
    its TTL is closed now and shown ``expired``."""
    return expiry.check(svc.registry.get(tenant.name, session_id))


@router.delete("/{session_id}", response_model=SessionInfo)
def close_session(session_id: str, svc: Svc, tenant: CurrentTenant) -> SessionInfo:
    """Close a session; its container is destroyed. A turn in flight is cancelled
    first (409 only if it does not end within ``CLOSE_CANCEL_WAIT_S``).

    Its stored record is marked closed after the registry entry: if the store
    fails, the answer is 503 and a retry (the session is closed already) marks it.
    """
    info = svc.runner.close(tenant, session_id)
    svc.registry.close_record(tenant.name, session_id)
    return shown(info)


_KeyHeader = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        description="the client's key for this exec (8-128 characters of A-Z a-z 0-9 . _ : -): "
        "a request with the same key and body runs the command at most once and answers "
        f"the first run's result (kept {IDEMPOTENCY_TTL_S / 3600:.0f} h after it finished); "
        "the same key with another body is 422 idempotency_key_reused",
    ),
]


@router.post("/{session_id}/exec", response_model=ExecResult)
def exec_turn(
    session_id: str,
    body: ExecRequest,
    request: Request,
    svc: Svc,
    tenant: CurrentTenant,
    idempotency_key: _KeyHeader = None,
) -> ExecResult | Response:
    """Run one command. A second concurrent turn on the session gets 409 session_busy,
    unless it carries the same ``Idempotency-Key``: then it waits for the first's result.
    With ``Accept: text/event-stream`` the answer is the turn's events as they happen
    (``scheduler.api.stream``)."""
    key = check_key(idempotency_key) if idempotency_key is not None else None
    if EVENT_STREAM in request.headers.get("accept", ""):
        return stream.exec_events(
            svc, tenant, session_id, body, t0=request.state.t0, idempotency_key=key
        )
    return svc.runner.exec(tenant, session_id, body, t0=request.state.t0, idempotency_key=key)
