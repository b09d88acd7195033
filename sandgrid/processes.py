"""The wire models of background processes: a handle's facts, its logs, its requests.

A background process is started by ``POST /v1/sessions/{id}/processes`` (the
SDK's ``exec(..., background=True)``) and answers at once. Its handle names the
sandbox it runs in (``sandbox``): the process table lives in that sandbox, so
when the session's sandbox was replaced (its node died, it was lost or
released) the handle answers ``process_lost`` instead of waiting on nothing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models import WireModel

__all__ = [
    "MAX_PROC_WAIT_S",
    "MAX_STDIN_BYTES",
    "ProcessInfo",
    "ProcessKill",
    "ProcessList",
    "ProcessLogs",
    "ProcessStdin",
    "ProcessWait",
    "Signal",
]

MAX_PROC_WAIT_S = 10.0
"""The longest one wait call holds the session's sandbox; the SDK loops for longer."""
MAX_STDIN_BYTES = 1 << 20
"""The most one ``send_stdin`` carries (the agent's own cap)."""

Signal = Literal["TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2"]


class ProcessInfo(WireModel):
    """One background process: what ``processes`` lists and ``wait`` answers."""

    pid: int
    argv: list[str]
    running: bool
    exit_code: int | None = None
    signal: int | None = None
    started_at: float = Field(description="Unix time the process started")
    output_end: int = Field(0, description="bytes of output so far (absolute offset)")
    output_dropped: int = Field(
        0, description="oldest bytes no longer kept (the buffer holds output_bytes)"
    )
    sandbox: str = Field("", description="the sandbox the process runs in (its table's life)")
    node: str = ""
    kind: Literal["process"] = Field("process", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class ProcessList(WireModel):
    """Body of ``GET /v1/sessions/{id}/processes``."""

    processes: list[ProcessInfo]
    kind: Literal["process_list"] = Field("process_list", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class ProcessLogs(WireModel):
    """Output of a background process from an absolute offset (stdout and stderr merged).

    ``offset`` is where the next read starts; ``skipped`` counts bytes between
    ``since`` and the oldest byte kept that were dropped (never silently).
    """

    pid: int
    data: str
    since: int
    offset: int
    skipped: int = 0
    end: int
    running: bool
    kind: Literal["process_logs"] = Field("process_logs", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class ProcessStdin(WireModel):
    """Body of ``POST .../processes/{pid}/stdin``."""

    data: str = Field("", max_length=MAX_STDIN_BYTES)
    eof: bool = Field(False, description="close the process's stdin after writing")


class ProcessKill(WireModel):
    """Body of ``POST .../processes/{pid}/kill``: the signal for the process group."""

    signal: Signal = "TERM"


class ProcessWait(WireModel):
    """Body of ``POST .../processes/{pid}/wait``: one bounded wait."""

    timeout_s: float = Field(MAX_PROC_WAIT_S, ge=0, le=MAX_PROC_WAIT_S)
