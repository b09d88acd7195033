"""AgentScope Runtime's answers for sessions and turns: the pure mapping to its shapes.

A session is a ``ContainerModel`` (``container_info``) with a Docker-worded
status (``container_status``). Tool answers are MCP ``CallToolResult`` objects
in their wire form (``content``, ``isError``), as the runtime's own container
answers them, so agentscope's adapters can ``CallToolResult.model_validate``
them; ``list_tools`` is the runtime's OpenAI function schemas (``tool_list``).
The requests are in ``scheduler.api.compat.agentscope_models``.
"""

from __future__ import annotations

import posixpath
from typing import Any

from sandgrid.models import CodeResult, ExecResult, FileEntry, SessionInfo
from scheduler.api.compat.agentscope_models import DEFAULT_SANDBOX_TYPE, LABEL_CTX, LABEL_TYPE

__all__ = [
    "GENERIC_TOOLS",
    "cell_result",
    "container_info",
    "container_status",
    "error_result",
    "fs_entry",
    "tool_entry",
    "tool_list",
    "tool_result",
]

#: The image version agentscope reads back: ``SandboxService`` finds the sandbox
#: class by the type name it contains.
_VERSION = "sandgrid/runtime-sandbox-{type}"


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
