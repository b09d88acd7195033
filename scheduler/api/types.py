"""``/v1/types``: the catalog of sandbox types, and the live nodes serving each (25.1).

A client learns here, before creating a session, which types it may use and
which the grid can run now: a type with no live node is refused with 503
``no_capacity``. A tenant sees the types every tenant may use and its own
private ones; another tenant's private type is 404, as an unknown name is.

Adding and removing a type (``POST``, ``DELETE``) is an operator's act: it
takes the admin token (the file ``SANDGRID_ADMIN_TOKEN_FILE`` names,
``scheduler.api.operator_token``), never a tenant's. The operator's token
also reads every type, private ones included. No restart follows a change:
the nodes watch the catalog's version (``worker.serving``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import redis
from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sandgrid.errors import InfrastructureError, SandgridError
from sandgrid.sandbox_types import SandboxTypeInfo, SandboxTypeSpec, TypeList
from scheduler.api.deps import Svc, current_tenant
from scheduler.api.operator_token import check_file_token, file_token_matches
from scheduler.registry.types import TypeCatalog

__all__ = [
    "Caller",
    "Creds",
    "add_type",
    "current_caller",
    "get_type",
    "list_types",
    "remove_type",
    "require_admin",
    "router",
    "seed_types",
]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/types", tags=["types"])

_bearer = HTTPBearer(
    auto_error=False, description="a tenant's token, or the operator's admin token"
)
Creds = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


async def current_caller(request: Request, svc: Svc, creds: Creds) -> str | None:
    """The calling tenant's name, or None for the operator (the admin token).

    Raises:
        AuthError: neither the admin token nor a tenant's (401).
    """
    given = creds.credentials if creds else ""
    if given and file_token_matches(given, svc.settings.admin_token_file):
        return None
    return (await current_tenant(request, creds)).name


def require_admin(svc: Svc, creds: Creds) -> None:
    """Refuse a caller without the admin token (401).

    Raises:
        AuthError: no token, a wrong one, or none configured.
    """
    check_file_token(
        creds.credentials if creds else "",
        svc.settings.admin_token_file,
        setting="SANDGRID_ADMIN_TOKEN_FILE",
        operation="admin",
    )


Caller = Annotated[str | None, Depends(current_caller)]


def _catalog(svc: Svc) -> TypeCatalog:
    if svc.types is None:
        raise InfrastructureError("no catalog of types in this API", operation="types")
    return svc.types


def _info(svc: Svc, spec: SandboxTypeSpec) -> SandboxTypeInfo:
    nodes = svc.admission.nodes.serving(spec.name)
    return SandboxTypeInfo.model_validate({**spec.model_dump(), "nodes": nodes})


@router.get("", response_model=TypeList)
def list_types(svc: Svc, caller: Caller) -> TypeList:
    """The types the caller may use, each with its definition and live nodes (names)."""
    visible = _catalog(svc).current().visible(caller)
    return TypeList(types=[_info(svc, t) for t in visible])


@router.get("/{name}", response_model=SandboxTypeInfo)
def get_type(name: str, svc: Svc, caller: Caller) -> SandboxTypeInfo:
    """One type, as the caller may see it (404: unknown, or another tenant's private type)."""
    return _info(svc, _catalog(svc).get(name, caller))


@router.post(
    "", response_model=SandboxTypeInfo, status_code=201, dependencies=[Depends(require_admin)]
)
def add_type(spec: SandboxTypeSpec, svc: Svc) -> SandboxTypeInfo:
    """Add a type (the admin token); nodes that can serve it start within a poll.

    Its image's digest is resolved from the grid's Docker engine unless given
    (422 naming ``image`` when neither is there); a taken name is 422.
    """
    return _info(svc, _catalog(svc).add(spec))


@router.delete("/{name}", response_model=SandboxTypeInfo, dependencies=[Depends(require_admin)])
def remove_type(name: str, svc: Svc) -> SandboxTypeInfo:
    """Remove a type (the admin token): 409 with the count while sessions of it are
    open; nodes stop consuming its queues and drain its pool within a poll."""
    return _info(svc, _catalog(svc).remove(name))


def seed_types(types: TypeCatalog, path: Path | None) -> None:
    """Seed the registry from the types file as the API starts.

    A bad file stops the start (its error names the entry and field); a
    registry or store that cannot be reached is logged, and the catalog stays
    what the registry (or, without one, the file) holds.

    Raises:
        InvalidInput: the types file breaks a rule.
    """
    try:
        report = types.seed(path)
    except redis.RedisError as exc:
        log.error("catalog: cannot seed the types file (%s)", type(exc).__name__)
        return
    except SandgridError as exc:
        if exc.code.value == "invalid_input":
            raise
        log.error("catalog: cannot seed the types file (%s)", exc.code.value)
        return
    log.info("catalog: %d types seeded, %d removed", len(report.written), len(report.removed))
