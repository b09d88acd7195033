"""The MCP server of the API: sandgrid's sessions as Model Context Protocol tools.

Served with the ``mcp`` package's streamable HTTP transport at ``/mcp`` on the
API itself, so an MCP client (Claude Desktop, an IDE, an agent framework) needs
only the API's address and a tenant's token (``Authorization: Bearer ...``).

Why it looks the way it does:

* Every HTTP request to ``/mcp`` is authenticated by the tenant store of the
  REST API (``TenantAuth``): no token, or an unknown one, is 401 before the MCP
  layer sees a byte. The tenant rides in the request's ASGI state to the tool.
* Tools call the same service layer as the REST routes (``scheduler.api.sessions``,
  ``TurnRunner``), in a worker thread as the sync routes do; never HTTP to
  ourselves. A ``SandgridError`` becomes a tool error (``is_error``) whose text
  starts with its stable code; bad arguments name the field and the rule, and
  an argument the tool does not take is refused, naming it (``_forbid_unknown``).
* The transport is stateless and answers JSON (no MCP session to keep in one
  process): any API process can serve any request, like the REST API.

Tools: ``create_session``, ``close_session``, ``exec``, ``read_file``,
``write_file``, ``list_files``; ``run_code`` only when the turn runner can run
code in a stateful interpreter (``run_code_supported``); the ``browser_*`` tools
for browser sessions (``scheduler.api.compat.mcp_browser``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ConfigDict, Field, ValidationError
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sandgrid.errors import AuthError, SandgridError
from sandgrid.models import (
    CodeRequest,
    ExecRequest,
    FileList,
    FileRead,
    FileWrite,
    Quotas,
    SessionCreate,
    WireModel,
)
from sandgrid.ops.files import ListOp, ReadOp, WriteOp, WriteResult
from sandgrid.ops.saved import bare_body
from scheduler.api import sessions
from scheduler.api.code import code_turn
from scheduler.api.compat import mcp_browser
from scheduler.api.deps import Services
from scheduler.tenants import Tenant, TenantStore

__all__ = [
    "MCP_PATH",
    "TENANT_STATE_KEY",
    "TenantAuth",
    "build_server",
    "mount",
]

#: Where the MCP endpoint is served on the API.
MCP_PATH = "/mcp"
#: The key of the authenticated tenant in the ASGI scope's state.
TENANT_STATE_KEY = "sandgrid_tenant"

T = TypeVar("T")

_SessionId = Annotated[str, Field(description="the session's id (s-...), from create_session")]
_WsPath = Annotated[str, Field(description="a path under /workspace (relative, or absolute)")]


class TenantAuth:
    """ASGI wrapper: authenticate the bearer token, then hand on with the tenant in state.

    Args:
        app: the MCP transport's ASGI app.
        tenants: the API's token store (cached lookups cost no Redis round trip).
    """

    def __init__(self, app: ASGIApp, tenants: TenantStore) -> None:
        self.app = app
        self.tenants = tenants

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            tenant = await self._tenant(scope)
        except AuthError as exc:
            headers = {"WWW-Authenticate": "Bearer"}
            response = JSONResponse(exc.to_body(), status_code=401, headers=headers)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[TENANT_STATE_KEY] = tenant
        await self.app(scope, receive, send)

    async def _tenant(self, scope: Scope) -> Tenant:
        auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = auth.partition(" ")
        token_or_none = token.strip() if scheme.lower() == "bearer" and token.strip() else None
        cached = self.tenants.from_cache(token_or_none)
        if cached is not None:
            return cached
        return await anyio.to_thread.run_sync(self.tenants.authenticate, token_or_none)


def _tenant_of(ctx: Context) -> Tenant:
    request = ctx.request_context.request
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    tenant = state.get(TENANT_STATE_KEY)
    if not isinstance(tenant, Tenant):  # only reachable if the route was mounted without auth
        raise ToolError("unauthenticated: this MCP endpoint needs a tenant's bearer token")
    return tenant


def _tool_error(exc: Exception) -> ToolError:
    """A ``SandgridError`` or a validation error as a tool error the model can read."""
    if isinstance(exc, ValidationError):
        rules = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
        )
        return ToolError(f"invalid_input: {rules}")
    assert isinstance(exc, SandgridError)
    field = exc.context.get("field")
    where = f" (field {field})" if field and str(field) not in exc.message else ""
    return ToolError(f"{exc.code}: {exc.message}{where}")


async def _call(fn: Callable[[], T]) -> T:
    """Run a blocking service call in a worker thread, as the sync REST routes are."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except (SandgridError, ValidationError) as exc:
        raise _tool_error(exc) from exc


def build_server(svc: Services, app: FastAPI) -> MCPServer:
    """The MCP server with sandgrid's tools over ``svc``."""
    server: MCPServer = MCPServer(
        name="sandgrid",
        instructions="Sandboxed sessions: create one, run commands and read or write its "
        "workspace files, then close it. Paths are under /workspace.",
    )
    _session_tools(server, svc, app)
    _exec_tool(server, svc)
    _file_read_tools(server, svc)
    _file_write_tool(server, svc)
    _run_code_tool(server, svc)
    mcp_browser.register(server, svc, _tenant_of, _tool_error)  # issue 21.4
    _forbid_unknown(server)
    return server


def _forbid_unknown(server: MCPServer) -> None:
    """Make every tool refuse an argument it does not take (the SDK ignores them).

    A caller that passes ``memory=true`` must learn the tool has no such thing,
    not get an ordinary call; the published input schemas say
    ``additionalProperties: false`` accordingly.
    """
    for tool in server._tool_manager.list_tools():
        loose = tool.fn_metadata.arg_model
        config = ConfigDict(**{**loose.model_config, "extra": "forbid"})
        strict: type[ArgModelBase] = type(
            loose.__name__, (loose,), {"model_config": config, "__module__": __name__}
        )
        tool.fn_metadata.arg_model = strict
        tool.parameters = strict.model_json_schema(by_alias=True)


def _session_tools(server: MCPServer, svc: Services, app: FastAPI) -> None:
    """A session's life: create_session, close_session."""

    @server.tool()
    async def create_session(
        ctx: Context,
        type: Annotated[str, Field(description="the sandbox type (see GET /v1/types)")] = "python",
        quotas: Annotated[
            dict[str, Any] | None, Field(description="limits: cpus, memory_mb, timeout_s, ...")
        ] = None,
        env: Annotated[
            dict[str, str] | None, Field(description="environment of every exec")
        ] = None,
        labels: Annotated[dict[str, str] | None, Field(description="your labels")] = None,
    ) -> dict[str, Any]:
        """Create a sandbox session; returns its id and record. Close it when done."""
        tenant = _tenant_of(ctx)

        def create() -> dict[str, Any]:
            spec = SessionCreate(
                type=type,
                quotas=Quotas.model_validate(quotas or {}),
                env=env or {},
                labels=labels or {},
            )
            info = sessions.create_session(spec, svc, tenant, app.state.expiry)
            return info.model_dump(mode="json")

        return await _call(create)

    @server.tool()
    async def close_session(ctx: Context, session_id: _SessionId) -> dict[str, Any]:
        """Close a session: its sandbox is destroyed and its snapshots deleted."""
        tenant = _tenant_of(ctx)
        info = await _call(lambda: sessions.close_session(session_id, svc, tenant))
        return info.model_dump(mode="json")


def _exec_tool(server: MCPServer, svc: Services) -> None:
    """One command in a session: exec."""

    @server.tool()
    async def exec(
        ctx: Context,
        session_id: _SessionId,
        command: Annotated[
            str | None, Field(description="a shell command line (sh -c); or give argv")
        ] = None,
        argv: Annotated[list[str] | None, Field(description="program and arguments")] = None,
        cwd: _WsPath = ".",
        stdin: Annotated[str | None, Field(description="text on the command's stdin")] = None,
        timeout_s: Annotated[
            float | None, Field(description="deadline in seconds (the session's default if unset)")
        ] = None,
    ) -> dict[str, Any]:
        """Run one command in the session's workspace; a non-zero exit is a result."""
        tenant = _tenant_of(ctx)
        t0 = time.monotonic()

        def run() -> dict[str, Any]:
            request = ExecRequest(
                shell=command, argv=argv, cwd=cwd, stdin=stdin, timeout_s=timeout_s
            )
            result = svc.runner.exec(tenant, session_id, request, t0=t0)
            return result.model_dump(mode="json", exclude={"timings"})

        return await _call(run)


def _file_read_tools(server: MCPServer, svc: Services) -> None:
    """``read_file`` and ``list_files``."""

    @server.tool()
    async def read_file(
        ctx: Context,
        session_id: _SessionId,
        path: _WsPath,
        encoding: Annotated[
            Literal["utf-8", "base64"], Field(description="base64 for binary content")
        ] = "utf-8",
    ) -> dict[str, Any]:
        """Read one file of the workspace."""
        return await _file_op(
            svc, ctx, session_id, lambda: ReadOp(path=path, encoding=encoding), FileRead
        )

    @server.tool()
    async def list_files(
        ctx: Context,
        session_id: _SessionId,
        path: _WsPath = ".",
        recursive: Annotated[bool, Field(description="descend into directories")] = False,
    ) -> dict[str, Any]:
        """List a directory of the workspace."""
        return await _file_op(
            svc, ctx, session_id, lambda: ListOp(path=path, recursive=recursive), FileList
        )


async def _file_op(
    svc: Services,
    ctx: Context,
    session_id: str,
    op: Callable[[], ReadOp | ListOp],
    model: type[WireModel],
) -> dict[str, Any]:
    """One read-only file op of the caller's tenant, answered as the REST API answers it;
    the op is built inside ``_call``, so a field it refuses is the tool's error."""
    tenant = _tenant_of(ctx)
    return await _call(
        lambda: svc.runner.op(tenant, session_id, op(), model).model_dump(mode="json")
    )


def _file_write_tool(server: MCPServer, svc: Services) -> None:
    """``write_file``."""

    @server.tool()
    async def write_file(
        ctx: Context,
        session_id: _SessionId,
        path: _WsPath,
        content: Annotated[str, Field(description="the file's content")],
        encoding: Annotated[
            Literal["utf-8", "base64"], Field(description="how content is encoded")
        ] = "utf-8",
        mode: Annotated[int, Field(description="permission bits", ge=0, le=0o777)] = 0o644,
    ) -> dict[str, Any]:
        """Write one file (parents are created; an existing file is replaced)."""
        tenant = _tenant_of(ctx)

        def write() -> dict[str, Any]:
            one = FileWrite(path=path, content=content, encoding=encoding, mode=mode)
            return bare_body(svc.runner.op(tenant, session_id, WriteOp(files=[one]), WriteResult))

        return await _call(write)


def _run_code_tool(server: MCPServer, svc: Services) -> None:
    @server.tool()
    async def run_code(
        ctx: Context,
        session_id: _SessionId,
        code: Annotated[str, Field(description="Python code for the session's interpreter")],
        timeout_s: Annotated[float | None, Field(description="deadline in seconds")] = None,
    ) -> dict[str, Any]:
        """Run Python code in the session's stateful interpreter (variables persist)."""
        tenant = _tenant_of(ctx)
        body = CodeRequest(code=code, timeout_s=timeout_s)
        result = await _call(lambda: code_turn(svc, tenant, session_id, body))
        return result.model_dump(mode="json")


def mount(app: FastAPI, svc: Services) -> Callable[[], Any]:
    """Add the ``/mcp`` route to ``app``; returns what the app's lifespan must enter.

    The transport's session manager runs a task group that must live as long as
    the app serves: ``async with mcp_lifespan(): ...`` inside the FastAPI lifespan.
    """
    server = build_server(svc, app)
    current: list[StreamableHTTPASGIApp] = []

    async def transport(scope: Scope, receive: Receive, send: Send) -> None:
        if not current:
            await JSONResponse({"error": "the MCP transport is not running"}, 503)(
                scope, receive, send
            )
            return
        await current[-1](scope, receive, send)

    endpoint = TenantAuth(transport, svc.tenants)
    app.router.routes.append(Route(MCP_PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))

    @asynccontextmanager
    async def running() -> AsyncIterator[None]:
        # A session manager runs once: each start of the app (tests start one app
        # more than once) gets a fresh one. Bearer tokens, not cookies,
        # authenticate: DNS rebinding gains nothing, and the API is served under
        # any host name, so the Host check is off.
        server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            # The grid's own cap (EdgeMiddleware, 413 in JSON-RPC's shape) is the
            # one that holds: the package's 4 MiB default would refuse files the
            # REST routes take.
            max_request_body_size=svc.settings.max_body_bytes,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = server.session_manager
        async with manager.run():
            current.append(StreamableHTTPASGIApp(manager))
            try:
                yield
            finally:
                current.remove(current[-1])

    return running
