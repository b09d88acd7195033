"""``SandgridSandboxClient``: the OpenAI Agents SDK's sandbox client over a sandgrid grid.

Options (``SandgridSandboxClientOptions``, ``type="sandgrid"``): the sandbox
type, its quotas (``background_processes`` is 64, the SDK's PTY process limit,
unless given), its network policy (``network``: egress as the type allows),
labels, ``keep_on_exit`` (leave the grid session open when the SDK session
shuts down, so that ``resume`` re-attaches to it) and ``exact_output`` (exec
output as the exact bytes, through a ``base64`` wrapper: ``exec_output``). The
grid's address and token are the client's (``SANDGRID_API_URL``, ``SANDGRID_TOKEN`` when omitted).

``resume`` re-attaches to the grid session the state names while it is open; the
grid itself restores that session from its own snapshot on any worker, so a lost
worker is invisible here. A closed or unknown session is replaced by a new one,
and the SDK hydrates it from the state's snapshot (``persist_workspace`` tars)
when the session starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

from agents.sandbox.manifest import Manifest
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.pty_types import PTY_PROCESSES_MAX
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from pydantic import Field

from sandgrid.client import AsyncClient
from sandgrid.errors import NotFound
from sandgrid.integrations.openai_agents.session import (
    SandgridSandboxSession,
    SandgridSandboxSessionState,
)
from sandgrid.models import SessionInfo

__all__ = ["SandgridSandboxClient", "SandgridSandboxClientOptions"]


class SandgridSandboxClientOptions(BaseSandboxClientOptions):
    """What a new grid session is made of (a JSON round-trip keeps it whole)."""

    type: Literal["sandgrid"] = "sandgrid"
    sandbox_type: str = "python"
    quotas: dict[str, Any] = Field(default_factory=dict)
    network: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    keep_on_exit: bool = False
    exact_output: bool = True
    #: Issue 21.2: the sandbox ports ``resolve_exposed_port`` may resolve (a signed
    #: preview URL each), and how long such a URL works.
    exposed_ports: tuple[int, ...] = ()
    preview_ttl_s: int = 3600


class SandgridSandboxClient(BaseSandboxClient[SandgridSandboxClientOptions]):
    """Creates, resumes and deletes SDK sandbox sessions as sandgrid sessions.

    Args:
        base_url: the grid's API; ``SANDGRID_API_URL`` when omitted.
        token: the tenant's token; ``SANDGRID_TOKEN`` when omitted.
        client: an ``AsyncClient`` to use instead (its owner closes it).
        instrumentation: the SDK's event sinks for every session made here (as the
            Docker and UnixLocal clients take them).
        dependencies: the SDK's session dependencies (a clone per session), e.g. what
            a ``RemoteSnapshotSpec`` needs to store and restore its snapshots.
    """

    backend_id = "sandgrid"
    supports_default_options = True

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        client: AsyncClient | None = None,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        self.client = client or AsyncClient(base_url, token)
        self._instrumentation = (
            instrumentation if instrumentation is not None else Instrumentation()
        )
        self._dependencies = dependencies

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: SandgridSandboxClientOptions | None = None,
    ) -> SandboxSession:
        """A new grid session; the manifest is applied when the SDK starts it."""
        options = options or SandgridSandboxClientOptions()
        manifest = self._validate_manifest_for_create(manifest or Manifest())
        env = await manifest.environment.resolve()
        info = await self._open(
            options.sandbox_type, options.quotas, options.network, options.labels, env
        )
        session_id = uuid.uuid4()
        state = SandgridSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            sandgrid_session_id=info.id,
            sandbox_type=options.sandbox_type,
            quotas=dict(options.quotas),
            network=options.network,
            labels=dict(options.labels),
            close_on_shutdown=not options.keep_on_exit,
            exact_output=options.exact_output,
            exposed_ports=options.exposed_ports,
            preview_ttl_s=options.preview_ttl_s,
        )
        inner = SandgridSandboxSession(state=state, client=self.client)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        """Close the grid session (idempotent: a closed or unknown one is fine)."""
        inner = session._inner
        if not isinstance(inner, SandgridSandboxSession):
            raise TypeError("SandgridSandboxClient.delete expects a SandgridSandboxSession")
        await inner.close_grid_session()
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Re-attach to the open grid session, or replace a closed one (see the module)."""
        if not isinstance(state, SandgridSandboxSessionState):
            raise TypeError("SandgridSandboxClient.resume expects a SandgridSandboxSessionState")
        state.assert_path_grants_rebound()
        live = await self._live(state.sandgrid_session_id)
        if live is None:
            env = await state.manifest.environment.resolve()
            info = await self._open(
                state.sandbox_type, state.quotas, state.network, state.labels, env
            )
            state.sandgrid_session_id = info.id
            state.workspace_root_ready = False
        inner = SandgridSandboxSession(state=state, client=self.client)
        inner._set_start_state_preserved(live is not None)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, SandgridSandboxSessionState)

    async def _live(self, session_id: str) -> SessionInfo | None:
        try:
            info = await self.client.get_session(session_id)
        except NotFound:
            return None
        return None if info.state == "closed" else info

    async def _open(
        self,
        sandbox_type: str,
        quotas: Mapping[str, Any],
        network: bool,
        labels: Mapping[str, str],
        env: Mapping[str, str],
    ) -> SessionInfo:
        wanted = {"background_processes": PTY_PROCESSES_MAX, **quotas}
        return await self.client.create_session(
            sandbox_type,
            quotas={**wanted, "network": network} if network else wanted,
            env=dict(env),
            labels=dict(labels),
        )
