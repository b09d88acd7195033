"""The terminal op: a login shell on a pty, one long turn of its session.

Output and input travel on Redis Streams (``sandgrid.wire.names.pty_out_key``
and ``pty_in_key`` of the turn's id), not in the job or its result: the result
says only how the shell ended. The limits are ``sandgrid.terminal``'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models import WireModel
from sandgrid.ops.saved import SavedResult
from sandgrid.terminal import (
    PTY_DEFAULT_COLS,
    PTY_DEFAULT_IDLE_S,
    PTY_DEFAULT_MAX_S,
    PTY_DEFAULT_ROWS,
    PTY_MAX_DIM,
    PTY_MAX_IDLE_S,
    PTY_MAX_S,
)

__all__ = ["PtyOp", "PtyResult"]


class PtyOp(WireModel):
    """An interactive terminal: a login shell on a pty, a long turn of the session.

    Output and input travel on the Redis Streams of ``names.pty_out_key`` and
    ``names.pty_in_key`` of ``pty_id`` (the turn's id), not in the job or outcome;
    the turn ends when the shell exits, on close, or at its idle or absolute limit.
    """

    kind: Literal["pty"] = "pty"
    pty_id: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$")
    rows: int = Field(PTY_DEFAULT_ROWS, ge=1, le=PTY_MAX_DIM)
    cols: int = Field(PTY_DEFAULT_COLS, ge=1, le=PTY_MAX_DIM)
    term: str = Field("xterm-256color", pattern=r"^[A-Za-z0-9._+-]{1,64}$")
    idle_s: float = Field(PTY_DEFAULT_IDLE_S, gt=0, le=PTY_MAX_IDLE_S)
    max_s: float = Field(PTY_DEFAULT_MAX_S, gt=0, le=PTY_MAX_S)


class PtyResult(SavedResult):
    """How the shell ended (the agent's ``pty`` reply).

    ``reason`` is ``exited`` (``exit_code`` is its status, ``signal`` the signal
    that killed it), ``closed``, ``idle``, ``max_time`` or ``error``.
    """

    kind: Literal["pty"] = Field("pty", exclude=True, repr=False)
    exit_code: int | None = None
    signal: int | None = None
    reason: str = "exited"
    bytes_out: int = 0
    duration_ms: float = 0.0
