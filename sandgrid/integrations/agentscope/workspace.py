"""``SandgridWorkspace``: an AgentScope 2.0 workspace that lives in one grid session.

``initialize`` finds the open grid session labelled with the workspace's id
(``agentscope.workspace.id``), or creates one; its ``/workspace`` is the
workspace's ``workdir``, laid out as AgentScope lays every workspace out
(``data/``, ``skills/``, ``sessions/``, ``.mcp``), and ``skill_paths`` are seeded
into it. ``close`` closes the grid session (its container is destroyed), unless
``keep_on_close``: then the session stays open and the next ``initialize`` of
the same ``workspace_id`` re-attaches to it, files and all, the way AgentScope's
E2B workspace pauses and resumes its sandbox. The grid itself restores a session
on another worker when its own is lost, so that stays invisible here.

MCP servers run on the host and are reached from there, as in AgentScope's
``LocalWorkspace`` (the sandboxed workspaces' in-sandbox gateway needs to
install packages in the sandbox at start, which an offline grid session cannot):
HTTP MCPs only, since a stdio MCP would run its command on the host, outside
the sandbox; it is refused with a ``ValueError`` that says so.
"""

from __future__ import annotations

import contextlib
from typing import Any

from agentscope.mcp import MCPClient
from agentscope.workspace import WorkspaceBase
from agentscope.workspace._utils import DEFAULT_WORKSPACE_INSTRUCTIONS, _read_glob_helper_bytes

from sandgrid.client import AsyncClient
from sandgrid.errors import NotFound
from sandgrid.integrations.agentscope.backend import SandgridBackend
from sandgrid.integrations.agentscope.calls import DEFAULT_MAX_TIMEOUT_S
from sandgrid.models import WORKSPACE, SessionInfo

__all__ = ["GLOB_HELPER", "WORKSPACE_LABEL", "SandgridWorkspace"]

WORKSPACE_LABEL = "agentscope.workspace.id"
"""The grid session label that names the workspace a session holds."""

GLOB_HELPER = f"{WORKSPACE}/.agentscope/glob_helper.py"
"""Where AgentScope's Glob tool finds its helper script in the sandbox (written at
``initialize``; under ``/workspace``, so a session restored elsewhere keeps it)."""

_GONE = ("closed", "lost", "expired")


def _host_side(mcp: MCPClient) -> MCPClient:
    """``mcp``, or a ``ValueError`` when it is a stdio MCP (it would run on the host)."""
    if getattr(mcp.mcp_config, "type", "") == "stdio_mcp":
        raise ValueError(
            f"MCP {mcp.name!r} is a stdio MCP: its command would run on the host, outside the "
            "grid sandbox; SandgridWorkspace serves HTTP MCPs (streamable HTTP or SSE) only"
        )
    return mcp


class SandgridWorkspace(WorkspaceBase):  # type: ignore[misc]  # agentscope is untyped here
    """A workspace whose files and commands are a grid session's.

    Args:
        client: the SDK's ``AsyncClient`` (its owner closes it); when omitted, one is made
            from ``SANDGRID_API_URL`` and ``SANDGRID_TOKEN`` and closed by ``close``.
        workspace_id: the workspace's id; a new one when omitted.
        sandbox_type: the grid sandbox type of a new session (``python``,
            ``python-gvisor``...).
        quotas: the new session's quotas (the type's defaults for the rest).
        labels: more labels for the new session.
        keep_on_close: leave the session open at ``close``, to re-attach later.
        max_timeout_s: the deadline of a command with ``timeout=None``.
        instructions: the system-prompt fragment (``{backend}``, ``{workdir}``).
        default_mcps: HTTP MCPs of every agent and session that declared none.
        skill_paths: local skill directories seeded into ``skills/`` at first start.
    """

    is_alive: bool
    _backend: SandgridBackend | None

    def __init__(
        self,
        *,
        client: AsyncClient | None = None,
        workspace_id: str | None = None,
        sandbox_type: str = "python",
        quotas: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None,
        keep_on_close: bool = False,
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
        instructions: str = DEFAULT_WORKSPACE_INSTRUCTIONS,
        default_mcps: list[MCPClient] | None = None,
        skill_paths: list[str] | None = None,
    ) -> None:
        mcps = [_host_side(m) for m in default_mcps or []]
        super().__init__(workspace_id=workspace_id, default_mcps=mcps, skill_paths=skill_paths)
        self.workdir = WORKSPACE
        self.sandbox_type = sandbox_type
        self.quotas = dict(quotas or {})
        self.labels = {**(labels or {}), WORKSPACE_LABEL: self.workspace_id}
        self.keep_on_close = keep_on_close
        self.max_timeout_s = max_timeout_s
        self.instructions = instructions.format(backend="sandgrid", workdir=WORKSPACE)
        self._own_client = client is None
        self._client = client
        self.session_id: str | None = None

    @property
    def client(self) -> AsyncClient:
        """The SDK client the workspace's calls go through (made on first use if not given)."""
        if self._client is None:
            self._client = AsyncClient()
        return self._client

    async def initialize(self) -> None:
        """Attach to the workspace's open grid session or create one, then lay it out."""
        if self.is_alive:
            return
        info = await self._attach_or_create()
        self.session_id = info.id
        backend = SandgridBackend(self.client, info.id, max_timeout_s=self.max_timeout_s)
        self._backend = backend
        self._mcp_specs = await self._restore_mcp_specs()
        dirs = [self.workdir, self._data_dir, self._skills_dir, self._sessions_dir]
        made = await backend.exec_shell(["mkdir", "-p", *dirs])
        if not made.ok():
            why = made.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"cannot lay out workspace {self.workspace_id!r}: {why}")
        await backend.write_file(GLOB_HELPER, _read_glob_helper_bytes())
        await self._migrate_skill_layout()
        await self._setup_skills()
        self.is_alive = True

    @property
    def _glob_helper_path(self) -> str:
        """The Glob tool's helper in the sandbox (the default names a host path)."""
        return GLOB_HELPER

    async def _attach_or_create(self) -> SessionInfo:
        """The newest open session labelled with this workspace's id, or a new one."""
        found = await self.client.find_sessions(labels={WORKSPACE_LABEL: self.workspace_id})
        live = [s for s in found if s.state not in _GONE]
        if live:
            return max(live, key=lambda s: s.created_at)
        return await self.client.create_session(
            self.sandbox_type, quotas=self.quotas or None, labels=self.labels
        )

    async def close(self) -> None:
        """Close the MCP clients, then the grid session (unless ``keep_on_close``)."""
        await self._close_all_mcp_instances()
        session_id, self.session_id = self.session_id, None
        self._backend, self.is_alive = None, False
        try:
            if session_id is not None and not self.keep_on_close:
                with contextlib.suppress(NotFound):  # closed already (its TTL): as wanted
                    await self.client.close_session(session_id)
        finally:
            if self._own_client and self._client is not None:
                await self._client.close()
                self._client = None  # a later initialize makes a new one

    async def reset(self) -> None:
        """Close every MCP and empty ``sessions/``, ``data/``, ``skills/`` and ``.mcp``."""
        backend = self.get_backend()
        async with self._mcp_lock, self._skill_lock:
            await self._close_all_mcp_instances()
            self._mcp_specs.clear()
            self._equipped_partitions.clear()
            paths = [self._sessions_dir, self._data_dir, self._skills_dir, self._mcp_file]
            await backend.exec_shell(["rm", "-rf", "--", *paths])

    async def get_instructions(self) -> str:
        """The system-prompt fragment, with the sandbox's ``workdir`` in it."""
        return str(self.instructions)

    async def add_mcp(
        self, mcp_client: MCPClient, *, agent_id: str | None = None, session_id: str | None = None
    ) -> MCPClient:
        """Declare an HTTP MCP for one agent/session, connect it and persist ``.mcp``.

        Raises:
            ValueError: the name is taken for this agent/session, or it is a stdio MCP.
        """
        key = (agent_id or "", session_id or "")
        async with self._mcp_lock:
            declared = self._declared_specs(*key)
            if any(m.name == mcp_client.name for m in declared):
                raise ValueError(f"MCP {mcp_client.name!r} already exists for {key}")
            await self._enforce_mcp_capacity(*key, _host_side(mcp_client))
            if mcp_client.is_stateful and not mcp_client.is_connected:
                await mcp_client.connect()
            self._mcp_instances.setdefault(key, {})[mcp_client.name] = mcp_client
            self._mcp_specs[key] = [*declared, mcp_client]
            await self._save_mcp_file()
            return mcp_client

    async def remove_mcp(
        self, name: str, *, agent_id: str | None = None, session_id: str | None = None
    ) -> None:
        """Drop an MCP of one agent/session (closing it) and persist ``.mcp``; unknown: no-op."""
        key = (agent_id or "", session_id or "")
        async with self._mcp_lock:
            declared = self._declared_specs(*key)
            if not any(m.name == name for m in declared):
                return
            live = self._mcp_instances.get(key, {}).pop(name, None)
            if live is not None:
                await self._close_mcp_instance(live)
            self._mcp_specs[key] = [m for m in declared if m.name != name]
            await self._save_mcp_file()
