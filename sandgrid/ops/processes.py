"""The background-process ops: start one, then a quick op on the running ones.

A start answers the process's handle, the public ``ProcessInfo`` of
``sandgrid.processes``; so do kill and wait. List answers ``ProcessList``,
logs ``ProcessLogs``; stdin answers ``StdinResult``, defined here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandgrid.models import ExecRequest, WireModel

__all__ = ["ProcOp", "ProcStartOp", "StdinResult"]


class ProcStartOp(WireModel):
    """Start ``request`` as a background process in the session's sandbox; answer at once."""

    kind: Literal["proc_start"] = "proc_start"
    request: ExecRequest


class ProcOp(WireModel):
    """A quick op on the background processes of the session's sandbox.

    Never starts a sandbox: when the session is not here, or its sandbox is not
    ``sandbox`` (the handle's), the worker answers ``process_lost``.
    """

    kind: Literal["proc"] = "proc"
    action: Literal["list", "logs", "stdin", "kill", "wait"]
    pid: int | None = None
    sandbox: str | None = None
    since: int = Field(0, ge=0)
    data: str = ""
    eof: bool = False
    signal: str = "TERM"
    timeout_s: float = Field(0.0, ge=0)


class StdinResult(WireModel):
    """How many bytes the process's stdin took (the body of ``POST .../stdin``)."""

    kind: Literal["process_stdin"] = Field("process_stdin", exclude=True, repr=False)
    written: int
