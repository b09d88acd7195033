"""The SDK's session lifecycle: checkpoints, restore, pause, filtered listing, any create.

One builder per call, each the one definition of its method on ``Client`` and
``AsyncClient`` (and, but for the two that take no session, on ``Session`` and
``AsyncSession``): the method tables in ``_base`` list them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from sandgrid.client._call import Call, parse_answer, parse_as
from sandgrid.lifecycle import (
    CheckpointCreate,
    CheckpointInfo,
    CheckpointList,
    ForkReply,
    ForkRequest,
    PauseRequest,
    PauseResult,
    RestoreRequest,
    RestoreResult,
)
from sandgrid.models import SessionCreate, SessionInfo, SessionList, SessionState

__all__ = [
    "checkpoint",
    "checkpoints",
    "create_session_from",
    "delete_checkpoint",
    "find_sessions",
    "fork",
    "pause",
    "restore",
]


def _none(_: httpx.Response) -> None:
    return None


def create_session_from(spec: SessionCreate) -> Call[SessionInfo]:
    """Create a session from a whole ``SessionCreate`` (TTLs, a checkpoint to fork...)."""
    body = spec.model_dump(mode="json", exclude_defaults=True)
    return Call("POST", "/v1/sessions", parse_as(SessionInfo), json=body)


def find_sessions(
    *, labels: Mapping[str, str] | None = None, state: SessionState | None = None
) -> Call[list[SessionInfo]]:
    """The open sessions with all of ``labels`` and in ``state``."""
    params: dict[str, Any] = {"label": [f"{k}={v}" for k, v in (labels or {}).items()]}
    if state is not None:
        params["state"] = state
    return Call(
        "GET",
        "/v1/sessions",
        lambda r: parse_answer(SessionList, r.content).sessions,
        params=params,
    )


def checkpoint(session_id: str, name: str, memory: bool = False) -> Call[CheckpointInfo]:
    """Save the workspace now and keep it as checkpoint ``name``; ``memory=True``
    (gVisor types) keeps the running processes too: ``restore`` brings them back."""
    body = CheckpointCreate(name=name, memory=memory).model_dump(mode="json")
    path = f"/v1/sessions/{session_id}/checkpoints"
    return Call("POST", path, parse_as(CheckpointInfo), json=body)


def checkpoints(session_id: str) -> Call[list[CheckpointInfo]]:
    """The session's checkpoints."""
    return Call(
        "GET",
        f"/v1/sessions/{session_id}/checkpoints",
        lambda r: parse_answer(CheckpointList, r.content).checkpoints,
    )


def delete_checkpoint(session_id: str, name: str) -> Call[None]:
    """Forget checkpoint ``name``."""
    return Call("DELETE", f"/v1/sessions/{session_id}/checkpoints/{name}", _none)


def restore(session_id: str, checkpoint: str) -> Call[RestoreResult]:
    """Roll the workspace back to ``checkpoint`` (changes since are gone)."""
    body = RestoreRequest(checkpoint=checkpoint).model_dump(mode="json")
    path = f"/v1/sessions/{session_id}/restore"
    return Call("POST", path, parse_as(RestoreResult), json=body)


def pause(session_id: str, memory: bool = False) -> Call[PauseResult]:
    """Save the workspace and free the sandbox; the next turn resumes it.

    ``memory=True`` (gVisor types) saves the running processes too: the next
    turn, on any node, finds its variables, servers and background processes.
    """
    path = f"/v1/sessions/{session_id}/pause"
    if not memory:
        return Call("POST", path, parse_as(PauseResult))
    body = PauseRequest(memory=True).model_dump(mode="json")
    return Call("POST", path, parse_as(PauseResult), json=body)


def fork(session_id: str, count: int = 1, memory: bool = False) -> Call[ForkReply]:
    """``count`` new sessions from this one, each with its own copy of the workspace;
    ``memory=True`` (gVisor types) gives each the running processes too. The source
    keeps running."""
    body = ForkRequest(count=count, memory=memory).model_dump(mode="json")
    return Call("POST", f"/v1/sessions/{session_id}/fork", parse_as(ForkReply), json=body)
