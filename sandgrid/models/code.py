"""Code for a session's Jupyter kernel: the request (``CodeRequest``) and its result."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models.base import MAX_SOURCE_BYTES, WireModel
from sandgrid.models.exec import SaveError

__all__ = ["CodeError", "CodeRequest", "CodeResult"]


class CodeRequest(WireModel):
    """Body of ``POST /v1/sessions/{id}/code``: code for the session's Jupyter kernel.

    Variables, imports and definitions stay in the kernel between calls; the kernel
    starts with the first call. At ``timeout_s`` (else the quotas' ``timeout_s``) the
    kernel is interrupted and keeps its state; if it does not stop, it is restarted.
    """

    code: str = Field(max_length=MAX_SOURCE_BYTES)
    language: Literal["python"] = "python"
    timeout_s: float | None = Field(None, gt=0, le=3600)


class CodeError(WireModel):
    """The exception that ended the code: its class name, its value, the traceback lines."""

    name: str
    value: str = ""
    traceback: list[str] = Field(default_factory=list)


class CodeResult(WireModel):
    """What one ``run_code`` call produced.

    Every output is capped at the quotas' ``output_bytes`` (``display`` in total),
    with a ``*_truncated`` flag. ``kernel_restarted`` says the kernel state of
    earlier calls is gone: the kernel was restarted at a hard deadline or died, or
    the session moved to a fresh sandbox (kernel state is not part of snapshots).
    """

    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    result: str | None = Field(None, description="text/plain of the last expression's value")
    result_truncated: bool = False
    display: list[dict[str, str]] = Field(
        default_factory=list,
        description="display data, one {mime type: data} per display (images in base64)",
    )
    display_truncated: bool = False
    error: CodeError | None = None
    execution_count: int | None = None
    kernel_restarted: bool = False
    timed_out: bool = False
    duration_ms: float = 0.0
    node: str = ""
    saved: bool = True
    saved_error: SaveError | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    kind: Literal["run_code"] = Field("run_code", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""
