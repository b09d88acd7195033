"""The run_code op: code for the session's Jupyter kernel, started on first use.

Its result is the public ``CodeResult`` of ``sandgrid.models``.
"""

from __future__ import annotations

from typing import Literal

from sandgrid.models import CodeRequest, WireModel

__all__ = ["RunCodeOp"]


class RunCodeOp(WireModel):
    """Run code in the session's Jupyter kernel; answers ``CodeResult``."""

    kind: Literal["run_code"] = "run_code"
    request: CodeRequest
