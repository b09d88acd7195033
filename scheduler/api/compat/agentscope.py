"""AgentScope Runtime's remote sandbox-manager API, served by the grid.

``SandboxManager(base_url=..., bearer_token=...)`` of agentscope-runtime 1.1.6
(and its ``Sandbox``/``SandboxService`` over it) talks to this router unchanged:
``POST /<method>`` and ``/<method>_async`` for every ``@remote_wrapper`` method
(``create``, ``create_from_pool``, ``start``, ``stop``, ``get_status``,
``release``, ``get_info``, ``check_health``, ``list_tools``, ``call_tool``,
``add_mcp_servers`` (refused: no MCP servers in a grid sandbox), ``cleanup``,
``get_session_mapping`` and ``list_session_keys``), each answering
``{"data": ...}``; ``GET /health``. Its bearer token is a tenant's token. A
sandbox is a session of the grid type serving its AgentScope type (requests in
``scheduler.api.compat.agentscope_models``, answers in ``agentscope_answers``); tools
run as turns of that session through the same runner as ``/v1/sessions/{id}/exec``.
``run_ipython_cell`` runs its code in the session's Jupyter kernel
(``scheduler.api.code``): state stays between cells. A ``filesystem`` box also has
the MCP filesystem server's tools, served by the grid's file ops
(``scheduler.api.compat.agentscope_fs_tools``).
The file routes (``/proxy/{identity}/workspace/...``) are in
``scheduler.api.compat.agentscope_files``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from anyio import from_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from sandgrid.errors import InvalidInput, NotFound
from sandgrid.models import CodeRequest, ExecRequest, SessionCreate, SessionInfo
from scheduler.api.code import code_turn
from scheduler.api.compat import agentscope_files
from scheduler.api.compat.agentscope_answers import (
    cell_result,
    container_info,
    container_status,
    error_result,
    tool_list,
    tool_result,
)
from scheduler.api.compat.agentscope_browser import call_browser_tool
from scheduler.api.compat.agentscope_errors import RuntimeErrorRoute
from scheduler.api.compat.agentscope_fs_tools import FS_ARGS, FS_TOOLS, run_fs_tool
from scheduler.api.compat.agentscope_models import (
    DEFAULT_SANDBOX_TYPE,
    FILESYSTEM_TYPES,
    LABEL_CTX,
    LABEL_TYPE,
    CallToolBody,
    CreateBody,
    CreateFromPoolBody,
    GetInfoBody,
    IdentityBody,
    IpythonArgs,
    ListToolsBody,
    McpServersBody,
    SessionMappingBody,
    ShellArgs,
    grid_type_for,
    labels_for,
)
from scheduler.api.deps import NO_BODY, CurrentTenant, Svc
from scheduler.api.errors import invalid_input_from
from scheduler.api.lifecycle import ExpiryDep, pause_session
from scheduler.api.sessions import close_session, create_session

__all__ = [
    "add_mcp_servers",
    "call_tool",
    "check_health",
    "cleanup",
    "create",
    "create_from_pool",
    "get_info",
    "get_session_mapping",
    "get_status",
    "health",
    "list_session_keys",
    "list_tools",
    "release",
    "router",
    "start",
    "stop",
]

router = APIRouter(tags=["agentscope"], route_class=RuntimeErrorRoute)
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
    """A new session of the grid type serving ``sandbox_type``; its id is the identity.

    The grid's warm pool is the pool: no container starts until the first turn.
    A type the grid cannot serve is 422 naming ``sandbox_type``.
    """
    return {"data": _open(body, {}, svc, tenant, expiry, "create_from_pool")}


@_twin("/create")
def create(body: CreateBody, svc: Svc, tenant: CurrentTenant, expiry: ExpiryDep) -> _Data:
    """``create``: as ``create_from_pool``, with ``environment`` as the session's env.

    ``mount_dir`` and ``storage_path`` (a host directory bound into the
    runtime's container) cannot be honoured by a grid sandbox: 422 naming them.
    """
    for field in ("mount_dir", "storage_path"):
        if getattr(body, field) is not None:
            raise InvalidInput(
                f"{field}: a sandgrid sandbox has no host directory to mount; "
                "write files through the workspace API instead",
                operation="create",
                context={"field": field, "rule": "must be null"},
            )
    return {"data": _open(body, body.environment or {}, svc, tenant, expiry, "create")}


def _open(
    body: CreateFromPoolBody,
    env: dict[str, str],
    svc: Svc,
    tenant: CurrentTenant,
    expiry: ExpiryDep,
    operation: str,
) -> str:
    """Create the session serving one ``create``/``create_from_pool`` call; its id."""
    try:
        grid_type = grid_type_for(body.sandbox_type, svc.settings.agentscope_grid_type)
    except ValueError as exc:
        raise InvalidInput(
            str(exc), operation=operation, context={"field": "sandbox_type", "rule": str(exc)}
        ) from exc
    try:
        labels = labels_for(body)
    except ValueError as exc:
        raise InvalidInput(
            str(exc),
            operation=operation,
            context={"field": "meta.session_ctx_id", "rule": str(exc)},
        ) from exc
    try:
        spec = SessionCreate(type=grid_type, labels=labels, env=env)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", "environment", *e["loc"][1:])} for e in exc.errors()]
        raise invalid_input_from(errors, operation) from exc
    return create_session(spec, svc, tenant, expiry).id


def _find(svc: Svc, tenant: CurrentTenant, identity: str) -> SessionInfo | None:
    """The tenant's session of that identity, or None (the runtime answers, not 404s)."""
    try:
        return svc.registry.get(tenant.name, identity)
    except NotFound:
        return None


@_twin("/start")
def start(body: IdentityBody, request: Request, svc: Svc, tenant: CurrentTenant) -> _Data:
    """Bring the sandbox up (a stopped one resumes from its snapshot); False if unknown.

    As the runtime's ``start``, the answer says whether it is running after.
    """
    info = _find(svc, tenant, body.identity)
    if info is None:
        return {"data": False}
    if info.state == "closed":
        return {"data": False}
    svc.runner.exec(tenant, info.id, ExecRequest(shell="true"), t0=request.state.t0)
    return {"data": True}


@_twin("/stop")
def stop(body: IdentityBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """Pause the session: its workspace is saved and its container given up.

    True after, and (as the runtime's) True for an unknown or closed identity.
    The next call (or ``start``) resumes it.
    """
    info = _find(svc, tenant, body.identity)
    if info is None:
        return {"data": True}
    if info.state != "closed":
        pause_session(info.id, svc, tenant)
    return {"data": True}


@_twin("/get_status")
def get_status(body: IdentityBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """The container status the runtime reports (Docker's words), or None if there is none."""
    info = _find(svc, tenant, body.identity)
    if info is None:
        return {"data": None}
    return {"data": container_status(info)}


@_twin("/cleanup", body=False)
def cleanup(svc: Svc, tenant: CurrentTenant) -> _Data:
    """Close every open AgentScope sandbox of the tenant (sessions made by this API only)."""
    for info in svc.registry.list(tenant.name):
        if LABEL_TYPE in info.labels and info.state != "closed":
            with suppress(NotFound):
                close_session(info.id, svc, tenant)
    return {"data": None}


@_twin("/add_mcp_servers")
def add_mcp_servers(body: McpServersBody, svc: Svc, tenant: CurrentTenant) -> JSONResponse:
    """Refused: a grid sandbox runs no MCP servers of its own.

    Answered as the runtime answers a method that fails (``{"detail": "Error in
    add_mcp_servers: ..."}``, which its client raises with), with 501: the
    servers would never be added, so success would be a lie.
    """
    svc.registry.get(tenant.name, body.identity)
    detail = (
        "Error in add_mcp_servers: sandgrid sandboxes run no MCP servers; "
        "run the MCP server outside the sandbox, or use sandgrid's own MCP endpoint"
    )
    return JSONResponse({"detail": detail}, status_code=501)


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
    info = _find(svc, tenant, body.identity)
    if info is None:
        return {"data": False}
    return {"data": info.state != "closed"}


def _fs_box(info: SessionInfo) -> bool:
    """Whether the session serves a ``filesystem`` box (the MCP filesystem tools too)."""
    return info.labels.get(LABEL_TYPE, DEFAULT_SANDBOX_TYPE) in FILESYSTEM_TYPES


@_twin("/list_tools")
def list_tools(body: ListToolsBody, svc: Svc, tenant: CurrentTenant) -> _Data:
    """The generic tools, and a ``filesystem`` box's MCP filesystem tools under ``filesystem``."""
    info = svc.registry.get(tenant.name, body.identity)
    extra = {"filesystem": FS_TOOLS} if _fs_box(info) else None
    return {"data": tool_list(body.tool_type, extra)}


@_twin("/call_tool")
def call_tool(body: CallToolBody, request: Request, svc: Svc, tenant: CurrentTenant) -> _Data:
    """Run a tool as turns of the session: ``run_shell_command``, ``run_ipython_cell``,
    and in a ``filesystem`` box the MCP filesystem tools (``agentscope_fs_tools``).

    Bad arguments are 422 naming ``arguments.<name>``; a tool the grid does not
    serve is an MCP error result, as the runtime answers an unknown tool.
    """
    if body.tool_name.startswith("browser_"):  # BrowserSandbox (issue 21.4)
        return {"data": from_thread.run(call_browser_tool, svc, tenant, body.identity,
                                        body.tool_name, body.arguments)}  # fmt: skip
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
        info = svc.registry.get(tenant.name, body.identity)
        if body.tool_name in FS_ARGS and _fs_box(info):
            args = _args(FS_ARGS[body.tool_name], body.arguments)
            return {"data": run_fs_tool(svc, tenant, body.identity, body.tool_name, args)}
        served = "run_shell_command, run_ipython_cell" + (
            " and the filesystem tools" if _fs_box(info) else ""
        )
        return {
            "data": error_result(f"tool {body.tool_name!r} is not served by sandgrid: {served} are")
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
