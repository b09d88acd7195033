"""AgentScope Runtime's remote sandbox-manager API, served by the grid.

``SandboxManager(base_url=..., bearer_token=...)`` of agentscope-runtime 1.1.6
(and its ``Sandbox``/``SandboxService`` over it) talks to this router unchanged:
``POST /<method>`` and ``/<method>_async`` for ``create_from_pool``, ``release``,
``get_info``, ``check_health``, ``list_tools``, ``call_tool``,
``get_session_mapping`` and ``list_session_keys``, each answering
``{"data": ...}``; ``GET /health``. Its bearer token is a tenant's token. A
sandbox is a session of type ``python`` (shapes and mapping in
``scheduler.api.compat.agentscope_models``); tools run as turns of that session through
the same runner as ``/v1/sessions/{id}/exec``. ``run_ipython_cell`` runs its
code in the session's Jupyter kernel (``scheduler.api.code``): state stays
between cells.
The file routes (``/proxy/{identity}/workspace/...``) are in
``scheduler.api.compat.agentscope_files``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from pydantic import BaseModel, ValidationError

from sandgrid.errors import InvalidInput, NotFound
from sandgrid.models import CodeRequest, ExecRequest, SessionCreate
from scheduler.api.code import code_turn
from scheduler.api.compat import agentscope_files
from scheduler.api.compat.agentscope_models import (
    LABEL_CTX,
    CallToolBody,
    CreateFromPoolBody,
    GetInfoBody,
    IdentityBody,
    IpythonArgs,
    ListToolsBody,
    SessionMappingBody,
    ShellArgs,
    cell_result,
    container_info,
    error_result,
    labels_for,
    tool_list,
    tool_result,
)
from scheduler.api.deps import NO_BODY, CurrentTenant, Svc
from scheduler.api.errors import invalid_input_from
from scheduler.api.lifecycle import ExpiryDep
from scheduler.api.sessions import close_session, create_session

__all__ = [
    "call_tool",
    "check_health",
    "create_from_pool",
    "get_info",
    "get_session_mapping",
    "health",
    "list_session_keys",
    "list_tools",
    "release",
    "router",
]

router = APIRouter(tags=["agentscope"])
router.include_router(agentscope_files.router)

_Data = dict[str, Any]
_A = TypeVar("_A", bound=BaseModel)
_F = TypeVar("_F", bound=Callable[..., Any])


def _twin(path: str, *, body: bool = True) -> Callable[[_F], _F]:
    """Serve one handler at ``path`` and at its ``*_async`` twin (same JSON both ways).

    ``body=False``: the method has no parameters; the client sends ``{}``, and
    anything else is refused (``NO_BODY``).
    """

    def register(fn: _F) -> _F:
        deps = [] if body else [NO_BODY]
        router.post(path, dependencies=deps)(fn)
        router.post(f"{path}_async", name=f"{path.strip('/')}_async", dependencies=deps)(fn)
        return fn

    return register


@router.get("/health")
def health() -> _Data:
    """The manager's health check; like the runtime's, it needs no token."""
    return {"status": "healthy", "version": "sandgrid"}


@_twin("/create_from_pool")
def create_from_pool(
    body: CreateFromPoolBody, svc: Svc, tenant: CurrentTenant, expiry: ExpiryDep
) -> _Data:
    """A new ``python`` session for any AgentScope type; its id is the identity.

    The grid's warm pool is the pool: no container starts until the first turn.
    """
    try:
        labels = labels_for(body)
    except ValueError as exc:
        raise InvalidInput(
            str(exc),
            operation="create_from_pool",
            context={"field": "meta.session_ctx_id", "rule": str(exc)},
        ) from exc
    info = create_session(SessionCreate(type="python", labels=labels), svc, tenant, expiry)
    return {"data": info.id}


@_twin("/release")
def release(body: IdentityBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """Close the session (its container is destroyed); False for an unknown identity."""
    try:
        close_session(body.identity, svc, tenant)
    except NotFound:
        return {"data": False}
    return {"data": True}


@_twin("/get_info")
def get_info(body: GetInfoBody, request: Request, svc: Svc, tenant: CurrentTenant) -> _Data:
    """The sandbox as agentscope's ``ContainerModel``."""
    info = svc.registry.get(tenant.name, body.identity)
    return {"data": container_info(info, str(request.base_url))}


@_twin("/check_health")
def check_health(body: IdentityBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """True while the session is open (a turn brings its sandbox up on demand)."""
    try:
        info = svc.registry.get(tenant.name, body.identity)
    except NotFound:
        return {"data": False}
    return {"data": info.state != "closed"}


@_twin("/list_tools")
def list_tools(body: ListToolsBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """The generic tools; a sandbox of the grid has no MCP servers."""
    svc.registry.get(tenant.name, body.identity)
    return {"data": tool_list(body.tool_type)}


@_twin("/call_tool")
def call_tool(body: CallToolBody, request: Request, svc: Svc, tenant: CurrentTenant) -> _Data:
    """Run ``run_shell_command`` or ``run_ipython_cell`` as one turn of the session.

    Bad arguments are 422 naming ``arguments.<name>``; a tool the grid does not
    serve is an MCP error result, as the runtime answers an unknown tool.
    """
    if body.tool_name == "run_shell_command":
        shell = _args(ShellArgs, body.arguments)
        req = ExecRequest(shell=shell.command)
    elif body.tool_name == "run_ipython_cell":  # on the session's stateful kernel
        cell = _args(IpythonArgs, body.arguments)
        code = code_turn(
            svc, tenant, body.identity, CodeRequest(code=cell.code), t0=request.state.t0
        )
        return {"data": cell_result(code)}
    else:
        svc.registry.get(tenant.name, body.identity)
        return {
            "data": error_result(
                f"tool {body.tool_name!r} is not served by sandgrid: "
                "run_shell_command and run_ipython_cell are"
            )
        }
    result = svc.runner.exec(tenant, body.identity, req, t0=request.state.t0)
    return {"data": tool_result(result, returncode=body.tool_name == "run_shell_command")}


def _args(model: type[_A], arguments: dict[str, Any]) -> _A:
    """A tool's arguments, or 422 naming ``arguments.<field>`` and the rule."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", "arguments", *e["loc"])} for e in exc.errors()]
        raise invalid_input_from(errors, "call_tool") from exc


@_twin("/get_session_mapping")
def get_session_mapping(body: SessionMappingBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """The open sandboxes created for an AgentScope session context, oldest first."""
    sessions = svc.registry.list(tenant.name)
    mine = [s for s in sessions if s.labels.get(LABEL_CTX) == body.session_ctx_id]
    return {"data": [s.id for s in sorted(mine, key=lambda s: s.created_at)]}


@_twin("/list_session_keys", body=False)
def list_session_keys(svc: Svc, tenant: CurrentTenant) -> _Data:
    """Every session context with an open sandbox (``SandboxService.stop`` drains them)."""
    keys = {s.labels[LABEL_CTX] for s in svc.registry.list(tenant.name) if LABEL_CTX in s.labels}
    return {"data": sorted(keys)}
