"""``GET /v1/audit``: the caller's tenant's audit trail, never another tenant's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from sandgrid.audit import MAX_AUDIT_LIMIT, MAX_AUDIT_SINCE, AuditAction, AuditOrder, AuditPage
from sandgrid.errors import SandgridError
from scheduler.api.deps import CurrentTenant, Svc
from scheduler.audit.log import DEFAULT_AUDIT_LIMIT
from scheduler.audit.query import AuditQuery

__all__ = ["list_audit", "router"]

router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=AuditPage)
def list_audit(
    svc: Svc,
    tenant: CurrentTenant,
    session: Annotated[str | None, Query(max_length=128)] = None,
    action: Annotated[AuditAction | None, Query(description="only records of this action")] = None,
    since: Annotated[
        float | None, Query(ge=0, le=MAX_AUDIT_SINCE, description="epoch seconds")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_LIMIT)] = DEFAULT_AUDIT_LIMIT,
    order: Annotated[
        AuditOrder | None, Query(description="desc (newest first, the default) or asc")
    ] = None,
    cursor: Annotated[
        str | None,
        Query(max_length=512, description="the next_cursor of the previous page"),
    ] = None,
) -> AuditPage:
    """The tenant's records, newest first (``order=asc``: oldest first), from the
    object store and the recent ones.

    ``more`` is true when records beyond ``limit`` exist: ask again with
    ``cursor`` = ``next_cursor`` and the same ``session``, ``action`` and
    ``since``; pages never skip or repeat a record while new ones arrive.
    """
    if svc.audit is None:
        raise SandgridError("the audit trail is not configured", operation="audit")
    query = AuditQuery(tenant.name, session, action, since, order or "desc", limit)
    return svc.audit.page(query, cursor, order_given=order is not None)
