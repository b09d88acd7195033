"""The async shells of the SDK's session lifecycle (see ``_lifecycle``), for
``AsyncClient`` and ``AsyncSession``; ``test_client_parity`` holds them equal to
the sync ones."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from sandgrid.client._base import Call
from sandgrid.client._lifecycle import LifecycleCalls
from sandgrid.lifecycle import CheckpointInfo, PauseResult, RestoreResult
from sandgrid.models import SessionCreate, SessionInfo, SessionState

__all__ = ["AsyncLifecycleMethods", "AsyncSessionLifecycle"]

T = TypeVar("T")


class AsyncLifecycleMethods(LifecycleCalls):
    """``AsyncClient``'s lifecycle methods."""

    async def _send(self, call: Call[T]) -> T:
        raise NotImplementedError

    async def create_session_from(self, spec: SessionCreate) -> SessionInfo:
        """Create a session from a whole ``SessionCreate`` (TTLs, a checkpoint to fork...)."""
        return await self._send(self._create_from_call(spec))

    async def find_sessions(
        self, *, labels: Mapping[str, str] | None = None, state: SessionState | None = None
    ) -> list[SessionInfo]:
        """The open sessions with all of ``labels`` and in ``state``."""
        return await self._send(self._find_sessions_call(labels, state))

    async def checkpoint(self, session_id: str, name: str) -> CheckpointInfo:
        """Save the workspace now and keep it as checkpoint ``name``."""
        return await self._send(self._checkpoint_call(session_id, name))

    async def checkpoints(self, session_id: str) -> list[CheckpointInfo]:
        return await self._send(self._checkpoints_call(session_id))

    async def delete_checkpoint(self, session_id: str, name: str) -> None:
        await self._send(self._delete_checkpoint_call(session_id, name))

    async def restore(self, session_id: str, checkpoint: str) -> RestoreResult:
        """Roll the workspace back to ``checkpoint`` (changes since are gone)."""
        return await self._send(self._restore_call(session_id, checkpoint))

    async def pause(self, session_id: str) -> PauseResult:
        """Save the workspace and free the sandbox; the next turn resumes it."""
        return await self._send(self._pause_call(session_id))


class _Handle(Protocol):
    @property
    def client(self) -> AsyncLifecycleMethods: ...
    @property
    def info(self) -> SessionInfo: ...


class AsyncSessionLifecycle:
    """``AsyncSession``'s lifecycle methods (on its client)."""

    async def checkpoint(self: _Handle, name: str) -> CheckpointInfo:
        return await self.client.checkpoint(self.info.id, name)

    async def checkpoints(self: _Handle) -> list[CheckpointInfo]:
        return await self.client.checkpoints(self.info.id)

    async def delete_checkpoint(self: _Handle, name: str) -> None:
        await self.client.delete_checkpoint(self.info.id, name)

    async def restore(self: _Handle, checkpoint: str) -> RestoreResult:
        return await self.client.restore(self.info.id, checkpoint)

    async def pause(self: _Handle) -> PauseResult:
        return await self.client.pause(self.info.id)
