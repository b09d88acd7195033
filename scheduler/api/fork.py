"""Route of a fork: N new sessions from one, with its memory (issue 24.2).

``POST /v1/sessions/{id}/fork {"count": N, "memory": true}``: the API records N
new sessions like the source (its type, quotas, environment, policies, labels,
network), then runs one turn of the source (``ForkSessionsOp``): its worker
saves the workspace, copies it into each fork and, with ``memory``,
checkpoints the sandbox once leaving it running and gives each fork its own
image. Each fork's first turn restores it on whichever node of the type takes
it, so the forks spread over the nodes. docs/memory.md.
"""

from __future__ import annotations

from contextlib import suppress

from fastapi import APIRouter, status

from sandgrid.errors import InvalidInput, SandgridError
from sandgrid.lifecycle import ForkReply, ForkRequest, ForkSessionsResult
from sandgrid.models import SessionCreate, SessionInfo
from sandgrid.ops.lifecycle import ForkSessionsOp
from sandgrid.wire.jobs import expect
from scheduler.api.deps import CurrentTenant, Services, Svc
from scheduler.api.lifecycle import ExpiryDep, check_memory_runtime
from scheduler.tenants import Tenant
from scheduler.turns.closing import closed_error

__all__ = ["fork_session", "router"]

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["lifecycle"])


@router.post("/fork", status_code=status.HTTP_201_CREATED, response_model=ForkReply)
def fork_session(
    session_id: str, body: ForkRequest, svc: Svc, tenant: CurrentTenant, expiry: ExpiryDep
) -> ForkReply:
    """``count`` new sessions from this one; the source keeps running.

    422 on ``count`` above the tenant's ``max_fork_count`` and on ``memory``
    for a runc type; 409 ``session_closed`` for a closed source and
    ``memory_unsavable`` naming what cannot be saved (nothing is made then);
    another tenant's session is 404. A source whose memory cannot be saved
    for another reason gives workspace forks, ``memory: false`` and the reason.
    """
    source = svc.registry.get(tenant.name, session_id)
    _check(source, body, tenant)
    svc.admission.check_capacity(source.type, "sessions.fork")
    made: list[SessionInfo] = []
    try:
        for _ in range(body.count):
            info = svc.registry.create(
                tenant.name,
                _spec(source),
                forked_from=source.id,
                max_sessions=tenant.limits.max_sessions,
            )
            made.append(info)
            svc.registry.save_record(info)
        op = ForkSessionsOp(targets=[m.id for m in made], memory=body.memory)
        done = svc.runner.run(tenant, source, op, timeout_s=None)
        result = expect(done.outcome, ForkSessionsResult, "fork_sessions")
    except SandgridError:
        _undo(svc, tenant, made)
        raise
    sessions = []
    for info in made:
        expiry.track(info)
        if svc.audit is not None:
            detail = {"type": source.type, "forked_from": source.id, "memory": result.memory}
            svc.audit.event(tenant.name, info.id, "session_create", detail=detail)
        sessions.append(svc.registry.get(tenant.name, info.id))
    return ForkReply(
        sessions=sessions,
        memory=result.memory,
        memory_bytes=result.memory_bytes,
        memory_new_bytes=result.memory_new_bytes,
        memory_ms=result.memory_ms,
        memory_reason=result.memory_reason,
    )


def _check(source: SessionInfo, body: ForkRequest, tenant: Tenant) -> None:
    ceiling = tenant.limits.max_fork_count
    if body.count > ceiling:
        raise InvalidInput(
            f"count: {body.count} forks asked, the tenant may make at most {ceiling} at once",
            operation="sessions.fork",
            context={"field": "count", "max": ceiling, "rule": "at most max_fork_count"},
        )
    if source.state == "closed":
        raise closed_error(source.id, "sessions.fork")
    if body.memory:
        check_memory_runtime(source.type)


_LIKE_SOURCE = frozenset(
    {"type", "quotas", "env", "snapshot_policy", "on_idle", "labels", "idle_timeout_s", "network"}
)
"""What a fork's record takes from its source's (the workspace is copied, not its files)."""


def _spec(source: SessionInfo) -> SessionCreate:
    """A new session like ``source``."""
    return SessionCreate.model_validate(source.model_dump(mode="json", include=set(_LIKE_SOURCE)))


def _undo(svc: Services, tenant: Tenant, made: list[SessionInfo]) -> None:
    """Close the forks of a fork that failed (and delete what was copied into them)."""
    for info in made:
        try:
            svc.runner.close(tenant, info.id)
        except SandgridError:
            svc.registry.close(info.id)
        with suppress(SandgridError):
            svc.registry.close_record(tenant.name, info.id)
