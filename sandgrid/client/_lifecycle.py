"""The SDK's session lifecycle: checkpoints, restore, pause, filtered listing, any create.

Pure call builders (``LifecycleCalls``) and their thin sync shells for the
client and the session handle (the async ones: ``_lifecycle_async``), kept
apart from ``_base``/``_sync``/``_async`` so that those stay small;
``test_client_parity`` holds them equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import httpx

from sandgrid.client._base import Call, _parse
from sandgrid.lifecycle import (
    CheckpointCreate,
    CheckpointInfo,
    CheckpointList,
    PauseResult,
    RestoreRequest,
    RestoreResult,
)
from sandgrid.models import SessionCreate, SessionInfo, SessionList, SessionState

__all__ = [
    "LifecycleCalls",
    "LifecycleMethods",
    "SessionLifecycle",
]

T = TypeVar("T")


def _none(_: httpx.Response) -> None:
    return None


class LifecycleCalls:
    """The requests of the lifecycle routes and how their answers are read."""

    def _create_from_call(self, spec: SessionCreate) -> Call[SessionInfo]:
        body = spec.model_dump(mode="json", exclude_defaults=True)
        return Call("POST", "/v1/sessions", _parse(SessionInfo), json=body)

    def _find_sessions_call(
        self, labels: Mapping[str, str] | None, state: SessionState | None
    ) -> Call[list[SessionInfo]]:
        params: dict[str, Any] = {"label": [f"{k}={v}" for k, v in (labels or {}).items()]}
        if state is not None:
            params["state"] = state
        return Call(
            "GET",
            "/v1/sessions",
            lambda r: SessionList.model_validate_json(r.content).sessions,
            params=params,
        )

    def _checkpoint_call(self, session_id: str, name: str) -> Call[CheckpointInfo]:
        body = CheckpointCreate(name=name).model_dump(mode="json")
        path = f"/v1/sessions/{session_id}/checkpoints"
        return Call("POST", path, _parse(CheckpointInfo), json=body)

    def _checkpoints_call(self, session_id: str) -> Call[list[CheckpointInfo]]:
        return Call(
            "GET",
            f"/v1/sessions/{session_id}/checkpoints",
            lambda r: CheckpointList.model_validate_json(r.content).checkpoints,
        )

    def _delete_checkpoint_call(self, session_id: str, name: str) -> Call[None]:
        return Call("DELETE", f"/v1/sessions/{session_id}/checkpoints/{name}", _none)

    def _restore_call(self, session_id: str, checkpoint: str) -> Call[RestoreResult]:
        body = RestoreRequest(checkpoint=checkpoint).model_dump(mode="json")
        path = f"/v1/sessions/{session_id}/restore"
        return Call("POST", path, _parse(RestoreResult), json=body)

    def _pause_call(self, session_id: str) -> Call[PauseResult]:
        return Call("POST", f"/v1/sessions/{session_id}/pause", _parse(PauseResult))


class LifecycleMethods(LifecycleCalls):
    """``Client``'s lifecycle methods."""

    def _send(self, call: Call[T]) -> T:
        raise NotImplementedError

    def create_session_from(self, spec: SessionCreate) -> SessionInfo:
        """Create a session from a whole ``SessionCreate`` (TTLs, a checkpoint to fork...)."""
        return self._send(self._create_from_call(spec))

    def find_sessions(
        self, *, labels: Mapping[str, str] | None = None, state: SessionState | None = None
    ) -> list[SessionInfo]:
        """The open sessions with all of ``labels`` and in ``state``."""
        return self._send(self._find_sessions_call(labels, state))

    def checkpoint(self, session_id: str, name: str) -> CheckpointInfo:
        """Save the workspace now and keep it as checkpoint ``name``."""
        return self._send(self._checkpoint_call(session_id, name))

    def checkpoints(self, session_id: str) -> list[CheckpointInfo]:
        return self._send(self._checkpoints_call(session_id))

    def delete_checkpoint(self, session_id: str, name: str) -> None:
        self._send(self._delete_checkpoint_call(session_id, name))

    def restore(self, session_id: str, checkpoint: str) -> RestoreResult:
        """Roll the workspace back to ``checkpoint`` (changes since are gone)."""
        return self._send(self._restore_call(session_id, checkpoint))

    def pause(self, session_id: str) -> PauseResult:
        """Save the workspace and free the sandbox; the next turn resumes it."""
        return self._send(self._pause_call(session_id))


class _Handle(Protocol):
    @property
    def client(self) -> LifecycleMethods: ...
    @property
    def info(self) -> SessionInfo: ...


class SessionLifecycle:
    """``Session``'s lifecycle methods (on its client)."""

    def checkpoint(self: _Handle, name: str) -> CheckpointInfo:
        return self.client.checkpoint(self.info.id, name)

    def checkpoints(self: _Handle) -> list[CheckpointInfo]:
        return self.client.checkpoints(self.info.id)

    def delete_checkpoint(self: _Handle, name: str) -> None:
        self.client.delete_checkpoint(self.info.id, name)

    def restore(self: _Handle, checkpoint: str) -> RestoreResult:
        return self.client.restore(self.info.id, checkpoint)

    def pause(self: _Handle) -> PauseResult:
        return self.client.pause(self.info.id)
