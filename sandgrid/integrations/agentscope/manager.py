"""``SandgridWorkspaceManager``: AgentScope 2.0's workspace manager over grid sessions.

AgentScope's app (``agentscope.app``) asks its manager for the workspace of a
user, agent and session (``get_workspace``), under the manager's isolation
policy (per session, per agent, per user: AgentScope's ``assign_workspace_id``).
This one hands out ``SandgridWorkspace`` objects over one shared SDK client and
keeps one per workspace id while the process runs; two first calls for the
same id at once make one workspace (a lock per id).

``close(workspace_id)`` closes a workspace; by default (``keep_on_close``) its
grid session stays open, so the workspace comes back with its files on the
next ``get_workspace``, from this process or another one (the session is found
by its ``agentscope.workspace.id`` label), the way AgentScope's E2B manager
pauses a sandbox rather than killing it. The session's own ``idle_timeout_s``
quota then bounds how long an unused workspace lives.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from agentscope.app.workspace_manager import WorkspaceManagerBase
from agentscope.app.workspace_manager._base import IsolationPolicy

from sandgrid.client import AsyncClient
from sandgrid.integrations.agentscope.calls import DEFAULT_MAX_TIMEOUT_S
from sandgrid.integrations.agentscope.workspace import SandgridWorkspace

__all__ = ["SandgridWorkspaceManager"]


class SandgridWorkspaceManager(WorkspaceManagerBase):  # type: ignore[misc]  # untyped here
    """Hands out one ``SandgridWorkspace`` per workspace id.

    Args:
        client: the SDK's ``AsyncClient`` (its owner closes it); when omitted, one is made
            from ``SANDGRID_API_URL`` and ``SANDGRID_TOKEN`` and closed when the manager exits.
        isolation: AgentScope's isolation grain (per agent by default).
        sandbox_type: the grid sandbox type of new sessions.
        quotas: the quotas of new sessions.
        keep_on_close: leave a workspace's session open when it is closed.
        max_timeout_s: the deadline of a command with ``timeout=None``.
        skill_paths: local skill directories seeded into every new workspace.
    """

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        isolation: IsolationPolicy = IsolationPolicy.PER_AGENT,
        sandbox_type: str = "python",
        quotas: dict[str, Any] | None = None,
        keep_on_close: bool = True,
        max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
        skill_paths: list[str] | None = None,
    ) -> None:
        super().__init__(isolation=isolation)
        self._own_client = client is None
        self.client = client or AsyncClient()
        self.options: dict[str, Any] = {
            "sandbox_type": sandbox_type,
            "quotas": dict(quotas or {}),
            "keep_on_close": keep_on_close,
            "max_timeout_s": max_timeout_s,
            "skill_paths": list(skill_paths or []),
        }
        self._workspaces: dict[str, SandgridWorkspace] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def get_workspace(
        self, user_id: str, agent_id: str, session_id: str, workspace_id: str | None = None
    ) -> SandgridWorkspace:
        """The initialized workspace of ``workspace_id`` (assigned by the policy when empty)."""
        if not workspace_id:
            workspace_id = await self.assign_workspace_id(
                user_id=user_id, agent_id=agent_id, session_id=session_id
            )
        async with self._locks[workspace_id]:
            ws = self._workspaces.get(workspace_id)
            if ws is None or not ws.is_alive:
                ws = SandgridWorkspace(
                    client=self.client, workspace_id=workspace_id, **self.options
                )
                await ws.initialize()
                self._workspaces[workspace_id] = ws
            return ws

    async def close(self, workspace_id: str) -> None:
        """Close one workspace and forget it (its session stays open with ``keep_on_close``)."""
        async with self._locks[workspace_id]:
            ws = self._workspaces.pop(workspace_id, None)
            if ws is not None:
                await ws.close()

    async def close_all(self) -> None:
        """Close every workspace this manager holds."""
        for workspace_id in list(self._workspaces):
            await self.close(workspace_id)

    async def __aexit__(self, *exc: object) -> None:
        """Close every workspace, then the client if the manager made it."""
        try:
            await self.close_all()
        finally:
            if self._own_client:
                await self.client.close()
