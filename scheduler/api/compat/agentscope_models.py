"""The shapes of AgentScope Runtime's remote sandbox-manager API, and the pure mapping.

agentscope-runtime 1.1.6's ``SandboxManager(base_url=...)`` posts each remote
method's parameters as one JSON object to ``/<method name>`` and reads the
answer's ``data``; its ``*_async`` twins declared as ``(*args, **kwargs)`` send a
lone positional argument as ``{"args": value}``, so every body here takes
``args`` as its first field. The client sends every parameter of its method's
own signature and nothing else; exactly those are accepted, and an unknown key
is 422 naming it (a caller must not believe it asked for what it did not get).
The sandbox it calls an *identity* is a sandgrid session of the python image;
the AgentScope session context lives in the session's labels (``LABEL_CTX``),
so ``get_session_mapping`` is a registry query.

Tool answers are MCP ``CallToolResult`` objects in their wire form (``content``,
``isError``), as the runtime's own container answers them, so agentscope's
adapters can ``CallToolResult.model_validate`` them.
"""

from __future__ import annotations

import posixpath
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandgrid.models import MAX_SOURCE_BYTES, CodeResult, ExecResult, FileEntry, SessionInfo
from sandgrid.wire.browser import BROWSER_TYPE

__all__ = [
    "BROWSER_BOXES",
    "DEFAULT_SANDBOX_TYPE",
    "FILESYSTEM_TYPES",
    "GENERIC_TOOLS",
    "LABEL_CTX",
    "LABEL_TYPE",
    "LABEL_VALUE_MAX",
    "REFUSED_TYPES",
    "SERVED_TYPES",
    "CallToolBody",
    "CreateBody",
    "CreateFromPoolBody",
    "GetInfoBody",
    "IdentityBody",
    "IpythonArgs",
    "ListToolsBody",
    "McpServersBody",
    "MoveBody",
    "PathBody",
    "SessionMappingBody",
    "ShellArgs",
    "cell_result",
    "container_info",
    "container_status",
    "error_result",
    "fs_entry",
    "grid_type_for",
    "labels_for",
    "tool_entry",
    "tool_list",
    "tool_result",
]

#: The label holding the AgentScope ``session_ctx_id`` a sandbox was created for.
LABEL_CTX = "agentscope.session_ctx_id"
#: The label holding the AgentScope sandbox type asked for (``base`` by default).
LABEL_TYPE = "agentscope.sandbox_type"
#: The longest label value accepted (a ``session_ctx_id`` or a type name).
LABEL_VALUE_MAX = 256
#: The AgentScope type a sandbox has when the caller names none.
DEFAULT_SANDBOX_TYPE = "base"
#: The AgentScope sandbox types the grid serves. Each runs in a session of the
#: grid type ``SANDGRID_AGENTSCOPE_GRID_TYPE`` names (the python image: ``python``
#: on runc, ``python-gvisor`` on runsc); ``filesystem`` boxes add the MCP
#: filesystem server's tools, served by the grid's file ops
#: (``scheduler.api.compat.agentscope_fs_tools``).
SERVED_TYPES: frozenset[str] = frozenset({"base", "base_async", "filesystem", "filesystem_async"})
#: The served types whose boxes have the MCP filesystem server's tools besides the generic.
FILESYSTEM_TYPES: frozenset[str] = frozenset({"filesystem", "filesystem_async"})
#: The AgentScope ``browser`` boxes: sessions of the grid's browser type, their
#: browser_* tools served over CDP (``scheduler.api.compat.agentscope_browser``,
#: issue 21.4), whatever ``SANDGRID_AGENTSCOPE_GRID_TYPE`` says.
BROWSER_BOXES: frozenset[str] = frozenset({"browser", "browser_async"})
SERVED_TYPES = SERVED_TYPES | BROWSER_BOXES
#: Why each AgentScope type the grid does not serve is refused at create: its
#: class calls tools no grid type has, so accepting it would hand back a sandbox
#: whose every tool call fails.
REFUSED_TYPES: dict[str, str] = {
    **dict.fromkeys(
        ("bfcl", "appworld"),
        "its tools (create_instance, get_task_ids, get_env_profile, step, evaluate, "
        "release_instance) are the runtime's training-environment service over its own "
        "processed datasets; the grid's bfcl/appworld types run the benchmarks as batch "
        "jobs (docs/batch.md) and serve no such service",
    ),
    **dict.fromkeys(
        ("gui", "gui_async", "mobile", "mobile_async"),
        "its computer/mobile tools need a desktop or an Android device; no grid type has one",
    ),
}
#: The image version agentscope reads back: ``SandboxService`` finds the sandbox
#: class by the type name it contains.
_VERSION = "sandgrid/runtime-sandbox-{type}"


class _Body(BaseModel):
    """A remote call's parameters; a lone positional ``args`` fills the first field."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _first: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _positional(cls, data: Any) -> Any:
        if isinstance(data, dict) and "args" in data:
            data = dict(data)
            arg = data.pop("args")
            data.setdefault(cls._first, arg)
        return data


class CreateFromPoolBody(_Body):
    """``/create_from_pool``: ``create_from_pool(sandbox_type=None, meta=None)``."""

    _first: ClassVar[str] = "sandbox_type"
    sandbox_type: str | None = Field(None, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")
    meta: dict[str, Any] | None = None


class CreateBody(CreateFromPoolBody):
    """``/create``: ``create(sandbox_type, mount_dir, storage_path, environment, meta)``.

    ``mount_dir`` and ``storage_path`` bind a host directory into the runtime's
    container; a grid sandbox has no host directory, so they are refused when set
    (``create_session_for``). ``environment`` becomes the session's env.
    """

    mount_dir: str | None = Field(None, max_length=4096)
    storage_path: str | None = Field(None, max_length=4096)
    environment: dict[str, str] | None = None


class McpServersBody(_Body):
    """``/add_mcp_servers``: ``add_mcp_servers(identity, server_configs, overwrite=False)``."""

    _first: ClassVar[str] = "identity"
    identity: str = Field(min_length=1, max_length=128)
    server_configs: dict[str, Any] | None = None
    overwrite: bool = False


class IdentityBody(_Body):
    """``/release``, ``/get_info``, ``/check_health``: one sandbox."""

    _first: ClassVar[str] = "identity"
    identity: str = Field(min_length=1, max_length=128)


class GetInfoBody(IdentityBody):
    """``/get_info``: ``get_info(identity, _redirect_depth=0)``; the depth is the
    runtime's own guard against redirect loops, which the grid never answers."""

    redirect_depth: int = Field(0, alias="_redirect_depth", ge=0, le=10)


class ListToolsBody(IdentityBody):
    """``/list_tools``: ``list_tools(identity, tool_type=None)``."""

    tool_type: str | None = Field(None, max_length=64)


class CallToolBody(IdentityBody):
    """``/call_tool``: ``call_tool(identity, tool_name=None, arguments=None)``."""

    tool_name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict)


class SessionMappingBody(_Body):
    _first: ClassVar[str] = "session_ctx_id"
    session_ctx_id: str = Field(min_length=1, max_length=LABEL_VALUE_MAX)


class ShellArgs(BaseModel):
    """The arguments of ``run_shell_command``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    command: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)


class IpythonArgs(BaseModel):
    """The arguments of ``run_ipython_cell``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    code: str = Field(min_length=1, max_length=MAX_SOURCE_BYTES)


class PathBody(BaseModel):
    """``POST /proxy/{identity}/workspace/mkdir``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str = Field(min_length=1, max_length=4096)


class MoveBody(BaseModel):
    """``POST /proxy/{identity}/workspace/move``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str = Field(min_length=1, max_length=4096)
    destination: str = Field(min_length=1, max_length=4096)


def grid_type_for(sandbox_type: str | None, python_type: str) -> str:
    """The grid type serving an AgentScope sandbox type (``base`` when none is named).

    ``python_type`` is the grid type configured for served types
    (``SANDGRID_AGENTSCOPE_GRID_TYPE``).

    Raises:
        ValueError: a type the grid cannot serve; the message says why and names
            the served ones.
    """
    name = sandbox_type or DEFAULT_SANDBOX_TYPE
    if name in BROWSER_BOXES:
        return BROWSER_TYPE
    if name in SERVED_TYPES:
        return python_type
    why = REFUSED_TYPES.get(name, "it is not an AgentScope sandbox type sandgrid knows")
    raise ValueError(
        f"sandbox_type {name!r} is not served by sandgrid: {why} "
        f"(served: {', '.join(sorted(SERVED_TYPES))})"
    )


def labels_for(body: CreateFromPoolBody) -> dict[str, str]:
    """The labels of the session that serves a ``create_from_pool`` call.

    Raises:
        ValueError: ``meta.session_ctx_id`` is not a string of at most
            ``LABEL_VALUE_MAX`` characters.
    """
    labels = {LABEL_TYPE: body.sandbox_type or DEFAULT_SANDBOX_TYPE}
    ctx = (body.meta or {}).get("session_ctx_id")
    if ctx is not None:
        if not isinstance(ctx, str) or not 0 < len(ctx) <= LABEL_VALUE_MAX:
            raise ValueError(
                f"meta.session_ctx_id must be a string of 1 to {LABEL_VALUE_MAX} characters"
            )
        labels[LABEL_CTX] = ctx
    return labels


def container_info(info: SessionInfo, base_url: str) -> dict[str, Any]:
    """The ``ContainerModel`` that agentscope's ``get_info`` returns, for a session.

    The identity, container id and name are all the session id; ``url`` is the
    session's file proxy on this API (agentscope reaches the sandbox only
    through the manager in remote mode).
    """
    box_type = info.labels.get(LABEL_TYPE, DEFAULT_SANDBOX_TYPE)
    ctx = info.labels.get(LABEL_CTX)
    return {
        "session_id": info.id,
        "container_id": info.id,
        "container_name": info.id,
        "url": f"{base_url.rstrip('/')}/proxy/{info.id}",
        "ports": [],
        "mount_dir": "/workspace",
        "storage_path": None,
        "runtime_token": None,
        "version": _VERSION.format(type=box_type),
        "meta": {"session_ctx_id": ctx} if ctx else {},
        "timeout": int(info.quotas.timeout_s),
        "sandbox_type": box_type,
        "session_ctx_id": ctx,
        "state": "released" if info.state == "closed" else "running",
        "created_at": info.created_at.timestamp(),
        "updated_at": info.last_used.timestamp(),
    }


def container_status(info: SessionInfo) -> str | None:
    """A session's state in the Docker words the runtime's ``get_status`` returns.

    ``running`` while a worker holds its sandbox, ``created`` before its first
    turn, ``exited`` when open but stopped (paused or idle: the next call
    resumes it), None once closed (the container is gone, as Docker answers for
    a removed one).
    """
    if info.state in ("closed", "expired", "lost"):
        return None
    if info.owner is not None:
        return "running"
    return "created" if info.state == "new" and info.snapshot is None else "exited"


def _text(text: str, description: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "annotations": None, "description": description}


def tool_result(result: ExecResult, *, returncode: bool) -> dict[str, Any]:
    """An exec's result as an MCP ``CallToolResult`` (the runtime's split output mode).

    Content is stdout, then stderr when there is any, then (``returncode``, for
    shell commands) the exit code. ``isError`` is the runtime's rule (anything
    on stderr), and also a deadline or the memory limit hit, or output cut at
    the grid's cap, each named in an ``error`` text: the runtime never cuts
    output, so a cut one is not the command's whole answer and must not pass
    for it (``isError: false``).
    """
    content = [_text(result.stdout, "stdout")]
    if result.stderr:
        content.append(_text(result.stderr, "stderr"))
    if returncode:
        content.append(_text(str(result.exit_code), "returncode"))
    hits = (
        (result.timed_out, "timed out"),
        (result.oom_killed, "ran out of memory"),
        (result.stdout_truncated, "wrote more stdout than the grid keeps (it is cut)"),
        (result.stderr_truncated, "wrote more stderr than the grid keeps (it is cut)"),
    )
    limits = [why for hit, why in hits if hit]
    if limits:
        content.append(_text(f"sandgrid: the command {' and '.join(limits)}", "error"))
    return {"meta": None, "content": content, "isError": bool(result.stderr or limits)}


def cell_result(result: CodeResult) -> dict[str, Any]:
    """A ``run_ipython_cell`` answer from the session's kernel, as an MCP ``CallToolResult``.

    Content is what the cell printed and the value of its last expression (as
    IPython shows ``Out``), then stderr and the error's traceback when there are
    any, then each PNG it displayed as image content. ``isError`` when the cell
    raised or timed out, or an output was cut at the grid's cap (named in stderr).
    """
    out = result.stdout + (f"{result.result}\n" if result.result is not None else "")
    content = [_text(out, "stdout")]
    err = result.stderr
    if result.error is not None:
        err += "\n".join(result.error.traceback) or f"{result.error.name}: {result.error.value}"
    if result.timed_out:
        err += "\nsandgrid: the cell timed out (the kernel was interrupted)"
    cut = [
        name
        for name, hit in (
            ("stdout", result.stdout_truncated),
            ("stderr", result.stderr_truncated),
            ("result", result.result_truncated),
            ("display", result.display_truncated),
        )
        if hit
    ]
    if cut:
        err += f"\nsandgrid: the cell's {', '.join(cut)} exceeded the grid's cap and was cut"
    if err:
        content.append(_text(err, "stderr"))
    for shown in result.display:
        if "image/png" in shown:
            content.append(
                {"type": "image", "data": shown["image/png"], "mimeType": "image/png",
                 "annotations": None}
            )  # fmt: skip
    failed = result.error is not None or result.timed_out or bool(cut)
    return {"meta": None, "content": content, "isError": failed}


def error_result(message: str) -> dict[str, Any]:
    """A failed tool call, as the runtime's client reports one."""
    return {"meta": None, "content": [_text(message, "error")], "isError": True}


def tool_entry(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    """One tool in the runtime's ``list_tools`` shape (an OpenAI function schema)."""
    parameters = {"type": "object", "properties": properties, "required": required}
    function = {"name": name, "description": description, "parameters": parameters}
    return {"name": name, "json_schema": {"type": "function", "function": function}}


#: The tools every sandbox has, in the runtime's ``list_tools`` shape.
GENERIC_TOOLS: dict[str, dict[str, Any]] = {
    name: tool_entry(name, description, {arg: {"type": "string", "description": doc}}, [arg])
    for name, description, arg, doc in (
        ("run_ipython_cell", "Run an IPython cell.", "code", "IPython code to execute"),
        ("run_shell_command", "Run a shell command.", "command", "Shell command to execute"),
    )
}


def tool_list(
    tool_type: str | None, extra: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """``list_tools``: the generic tools and ``extra`` servers' (by server name), filtered
    by ``tool_type`` as the runtime filters (one group, empty when unknown)."""
    tools: dict[str, Any] = {"generic": GENERIC_TOOLS, **(extra or {})}
    return {tool_type: tools.get(tool_type, {})} if tool_type else tools


def fs_entry(entry: FileEntry) -> dict[str, Any]:
    """A workspace entry in the runtime's shape (absolute path, name, ms mtime)."""
    path = "/workspace" if entry.path == "." else f"/workspace/{entry.path}"
    return {
        "path": path,
        "name": posixpath.basename(path),
        "type": entry.type,
        "size": entry.size if entry.type == "file" else None,
        "mtime_ms": int(entry.mtime * 1000),
    }
