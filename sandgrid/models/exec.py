"""One command: the request (``ExecRequest``) and what it did (``ExecResult``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sandgrid.models.base import MAX_SOURCE_BYTES, EnvVars, WireModel, WorkspacePath

__all__ = ["ExecRequest", "ExecResult", "SaveError"]


class ExecRequest(WireModel):
    """One command: exactly one of ``argv``, ``shell`` or ``python``."""

    argv: list[str] | None = Field(None, min_length=1, max_length=4096)
    shell: str | None = Field(None, max_length=MAX_SOURCE_BYTES)
    python: str | None = Field(None, max_length=MAX_SOURCE_BYTES)
    env: EnvVars = Field(default_factory=dict)
    cwd: WorkspacePath = "."
    stdin: str | None = Field(None, max_length=MAX_SOURCE_BYTES)
    timeout_s: float | None = Field(None, gt=0, le=3600)
    stream: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> ExecRequest:
        given = [n for n in ("argv", "shell", "python") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                f"exactly one of argv, shell, python must be set (got {', '.join(given) or 'none'})"
            )
        return self

    @field_validator("argv")
    @classmethod
    def _program(cls, v: list[str] | None) -> list[str] | None:
        """The program is a name or a path: an empty one cannot be started."""
        if v and not v[0]:
            raise ValueError("argv[0]: the program must be a non-empty name or path")
        return v


class SaveError(WireModel):
    """Why the workspace after a turn that ran could not be saved (the store was down)."""

    code: str
    message: str


class ExecResult(WireModel):
    """What one exec did.

    ``saved`` is False when the command ran but the snapshot after it failed
    (``saved_error`` says why): the output is real, the session is marked
    ``unsaved`` until a later snapshot succeeds, and a worker loss before then
    loses the workspace changes since the last snapshot.
    """

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False
    signal: int | None = None
    workspace_full: bool = False
    node: str = ""
    attempt: int = 1
    saved: bool = True
    saved_error: SaveError | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    cancelled: bool = Field(
        False,
        description="the turn was cancelled: every process it started was killed "
        "(or, cancelled before it started, it never ran)",
    )
    kind: Literal["exec"] = Field("exec", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""
