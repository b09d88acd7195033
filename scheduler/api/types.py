"""``GET /v1/types``: the catalog's sandbox types and the live nodes serving each.

A client learns here, before creating a session, which types the grid can run
now: a type with no live node is refused with 503 ``no_capacity``.
"""

from __future__ import annotations

from fastapi import APIRouter

from sandgrid.models import SandboxTypeInfo, TypeList
from sandgrid.wire.catalog import CATALOG
from scheduler.api.deps import CurrentTenant, Svc

__all__ = ["list_types", "router"]

router = APIRouter(prefix="/v1/types", tags=["types"])


@router.get("", response_model=TypeList)
def list_types(svc: Svc, tenant: CurrentTenant) -> TypeList:
    """Every catalog type with its runtime, image and live nodes (names only)."""
    nodes = svc.admission.nodes
    return TypeList(
        types=[
            SandboxTypeInfo(
                name=t.name, runtime=t.runtime, image=t.image, nodes=nodes.serving(t.name)
            )
            for t in sorted(CATALOG.values(), key=lambda t: t.name)
        ]
    )
