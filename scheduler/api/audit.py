"""``GET /v1/audit``: the caller's tenant's audit trail, never another tenant's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from sandgrid.audit import MAX_AUDIT_LIMIT, MAX_AUDIT_SINCE, AuditPage
from sandgrid.errors import SandgridError
from scheduler.api.deps import CurrentTenant, Svc
from scheduler.audit.log import DEFAULT_AUDIT_LIMIT

__all__ = ["list_audit", "router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=AuditPage)
def list_audit(
    svc: Svc,
    tenant: CurrentTenant,
    session: Annotated[str | None, Query(max_length=128)] = None,
    since: Annotated[
        float | None, Query(ge=0, le=MAX_AUDIT_SINCE, description="epoch seconds")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_LIMIT)] = DEFAULT_AUDIT_LIMIT,
) -> AuditPage:
    """The tenant's records, oldest first: those in the object store and the recent ones.

    ``more`` is true when records beyond ``limit`` exist: ask again with
    ``since`` the last record's ``ts``.
    """
    if svc.audit is None:
        raise SandgridError("the audit trail is not configured", operation="audit")
    return svc.audit.query(tenant.name, session=session, since=since, limit=limit)
