"""The exec op: run one command in the session's sandbox.

The request's body is the public ``ExecRequest``; its result is the public
``ExecResult`` of ``sandgrid.models`` (a non-zero exit is a result, not an error).
"""

from __future__ import annotations

from typing import Literal

from sandgrid.models import ExecRequest, WireModel

__all__ = ["ExecOp"]


class ExecOp(WireModel):
    """Run ``request`` in the session's sandbox; answers ``ExecResult``."""

    kind: Literal["exec"] = "exec"
    request: ExecRequest
