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

What the grid answers, in the runtime's shapes, is in
``scheduler.api.compat.agentscope_answers``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandgrid.models import MAX_SOURCE_BYTES
from sandgrid.wire.browser import BROWSER_TYPE

__all__ = [
    "BROWSER_BOXES",
    "DEFAULT_SANDBOX_TYPE",
    "FILESYSTEM_TYPES",
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
    "grid_type_for",
    "labels_for",
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
