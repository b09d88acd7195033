"""Routes of background processes: start, list, logs, stdin, kill, wait.

The process lives in one sandbox; its handle carries that sandbox's id, sent
back as the ``sandbox`` query parameter, so that a replaced sandbox answers
``process_lost`` rather than another process that reused the pid.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status

from sandgrid.models import ExecRequest
from sandgrid.ops.processes import ProcOp, StdinResult
from sandgrid.ops.saved import bare_body
from sandgrid.processes import (
    ProcessInfo,
    ProcessKill,
    ProcessList,
    ProcessLogs,
    ProcessStdin,
    ProcessWait,
)
from scheduler.api.deps import CurrentTenant, Svc
from scheduler.turns.processes import process_op, start_process

__all__ = [
    "kill_process",
    "list_processes",
    "process_logs",
    "process_stdin",
    "router",
    "start_background",
    "wait_process",
]

router = APIRouter(prefix="/v1/sessions/{session_id}/processes", tags=["processes"])

_Sandbox = Annotated[
    str | None,
    Query(description="the handle's sandbox: process_lost when the session has another one"),
]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProcessInfo)
def start_background(
    session_id: str, body: ExecRequest, request: Request, svc: Svc, tenant: CurrentTenant
) -> ProcessInfo:
    """Start a command in the background; answers at once with its handle (pid, sandbox)."""
    return start_process(svc.runner, tenant, session_id, body, t0=request.state.t0)


@router.get("", response_model=ProcessList)
def list_processes(session_id: str, svc: Svc, tenant: CurrentTenant) -> ProcessList:
    """The session's background processes, running or finished (empty when none lives)."""
    return process_op(svc.runner, tenant, session_id, ProcOp(action="list"), ProcessList)


@router.get("/{pid}/logs", response_model=ProcessLogs)
def process_logs(
    session_id: str,
    pid: int,
    svc: Svc,
    tenant: CurrentTenant,
    since: Annotated[int, Query(ge=0, description="absolute offset to read from")] = 0,
    sandbox: _Sandbox = None,
) -> ProcessLogs:
    """Output (stdout and stderr merged) from ``since``; ``offset`` is where to read on."""
    op = ProcOp(action="logs", pid=pid, since=since, sandbox=sandbox)
    return process_op(svc.runner, tenant, session_id, op, ProcessLogs)


@router.post("/{pid}/stdin")
def process_stdin(
    session_id: str,
    pid: int,
    body: ProcessStdin,
    svc: Svc,
    tenant: CurrentTenant,
    sandbox: _Sandbox = None,
) -> dict[str, Any]:
    """Write to the process's stdin; ``written`` says how many bytes it took."""
    op = ProcOp(action="stdin", pid=pid, data=body.data, eof=body.eof, sandbox=sandbox)
    return bare_body(process_op(svc.runner, tenant, session_id, op, StdinResult))


@router.post("/{pid}/kill", response_model=ProcessInfo)
def kill_process(
    session_id: str,
    pid: int,
    body: ProcessKill,
    svc: Svc,
    tenant: CurrentTenant,
    sandbox: _Sandbox = None,
) -> ProcessInfo:
    """Signal the process's group (its children too)."""
    op = ProcOp(action="kill", pid=pid, signal=body.signal, sandbox=sandbox)
    return process_op(svc.runner, tenant, session_id, op, ProcessInfo)


@router.post("/{pid}/wait", response_model=ProcessInfo)
def wait_process(
    session_id: str,
    pid: int,
    body: ProcessWait,
    svc: Svc,
    tenant: CurrentTenant,
    sandbox: _Sandbox = None,
) -> ProcessInfo:
    """Wait at most ``timeout_s`` (10 s) for the process to end; ``running`` says if it did."""
    op = ProcOp(action="wait", pid=pid, timeout_s=body.timeout_s, sandbox=sandbox)
    return process_op(svc.runner, tenant, session_id, op, ProcessInfo)
