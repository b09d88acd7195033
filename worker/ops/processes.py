"""Background-process turns on this node: start one, or a quick op on the running ones.

Each op is one quick agent request (``proc_*``, docs/agent-protocol.md) over the
backend's channel, checked here and turned into ``sandgrid.processes`` models.
The per-sandbox limit (``Quotas.background_processes``) is enforced by the
agent, which counts what runs; a refusal becomes ``LimitExceeded``.

A start is an ordinary turn (it may bring the session here and restore its
snapshot). The quick ops (``ProcOp``) never do: the processes live in one
sandbox, so when this node does not hold the session, or holds it in another
sandbox than the handle's, they are gone, and the answer is ``process_lost``
at once (a listing is then empty). Any op marks the workspace changed, since
the processes may write to it at any time: the next snapshot takes it. Any
op is also the session's use (the idle reaper counts from it), and one that
finds the session released meanwhile answers ``process_lost`` like one that
never found it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from sandgrid.errors import ErrorCode, LimitExceeded, SandboxLost, SandgridError
from sandgrid.models import ExecRequest
from sandgrid.ops.processes import ProcOp, ProcStartOp, StdinResult
from sandgrid.processes import MAX_PROC_WAIT_S, ProcessInfo, ProcessList, ProcessLogs
from sandgrid.wire.jobs import TurnJob
from worker.ops.base import NodeHandler, SandboxContext, SandboxHandler, TurnContext
from worker.ops.exec import exec_fields
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.pool_protocol import BackendFor
from worker.sessions.table import LocalSession, SessionTable

__all__ = [
    "HANDLERS",
    "keeps_resident",
    "live_processes",
    "proc_turn",
    "process_kill",
    "process_logs",
    "process_stdin",
    "process_wait",
    "processes",
    "start_process",
]

log = logging.getLogger(__name__)

_QUICK_S = 10.0
"""The channel deadline of a quick op (a wait adds its own timeout)."""

_ProcResult = ProcessInfo | ProcessList | ProcessLogs | StdinResult
"""What a quick op answers, by action (``sandgrid.ops.processes``)."""


# ---- the agent's proc_* ops ---------------------------------------------------------


def start_process(backend: SandboxManager, sbx: Sandbox, request: ExecRequest) -> ProcessInfo:
    """Start ``request`` in the background as the sandbox user; answer at once.

    Raises:
        LimitExceeded: ``quotas.background_processes`` already run.
        InvalidInput: bad cwd or argv (the command cannot be started).
    """
    fields = exec_fields(request, sbx.quotas, stream=False)
    fields.update(max_live=sbx.quotas.background_processes)
    reply = backend.call(sbx, "proc_start", fields, timeout=_QUICK_S)
    if not reply.pop("started"):
        limit = int(reply["limit"])
        raise LimitExceeded(
            f"quotas.background_processes: {limit} background processes already run in "
            "this sandbox; wait for or kill one first",
            operation="processes.start",
            context={"field": "quotas.background_processes", "limit": limit},
            retry_after=1.0,
        )
    return _info(sbx, reply)


def processes(backend: SandboxManager, sbx: Sandbox) -> list[ProcessInfo]:
    """Every background process the sandbox keeps, running or finished."""
    reply = backend.call(sbx, "proc_list", {}, timeout=_QUICK_S)
    return [_info(sbx, p) for p in reply["processes"]]


def live_processes(backend: SandboxManager, sbx: Sandbox) -> int:
    """How many background processes still run (the idle reaper asks)."""
    return sum(1 for p in processes(backend, sbx) if p.running)


def process_logs(backend: SandboxManager, sbx: Sandbox, pid: int, since: int = 0) -> ProcessLogs:
    """Output from the absolute offset ``since`` (see ``ProcessLogs``)."""
    reply = backend.call(sbx, "proc_logs", {"pid": pid, "since": since}, timeout=_QUICK_S)
    return ProcessLogs(pid=pid, **reply)


def process_stdin(
    backend: SandboxManager, sbx: Sandbox, pid: int, data: str, eof: bool = False
) -> int:
    """Write to the process's stdin (never blocking); how many bytes it took."""
    fields = {"pid": pid, "data": data, "eof": eof}
    return int(backend.call(sbx, "proc_stdin", fields, timeout=_QUICK_S)["written"])


def process_kill(
    backend: SandboxManager, sbx: Sandbox, pid: int, signal: str = "TERM"
) -> ProcessInfo:
    """Send ``signal`` to the process's group."""
    reply = backend.call(sbx, "proc_kill", {"pid": pid, "signal": signal}, timeout=_QUICK_S)
    reply.pop("signalled", None)
    return _info(sbx, reply)


def process_wait(backend: SandboxManager, sbx: Sandbox, pid: int, timeout: float) -> ProcessInfo:
    """Wait up to ``timeout`` (at most ``MAX_PROC_WAIT_S``) for the process to end."""
    timeout = min(max(timeout, 0.0), MAX_PROC_WAIT_S)
    fields = {"pid": pid, "timeout": timeout}
    return _info(sbx, backend.call(sbx, "proc_wait", fields, timeout=timeout + _QUICK_S))


def _info(sbx: Sandbox, reply: dict[str, Any]) -> ProcessInfo:
    return ProcessInfo(**reply, sandbox=sbx.id)


# ---- the turns ---------------------------------------------------------------------


def keeps_resident(backends: Sequence[SandboxManager], local: LocalSession) -> bool:
    """Whether an idle session must stay here: a background process still runs in it.

    The idle reaper asks (under the session's lock) before it releases a
    session; a sandbox that cannot answer holds nothing worth keeping.
    """
    sbx = local.sandbox
    runtime = getattr(sbx, "runtime", None)  # test doubles may have none
    for backend in backends:
        if runtime is not None and getattr(backend, "runtime", None) == runtime:
            try:
                return live_processes(backend, sbx) > 0
            except SandgridError as exc:
                log.warning("session %s: cannot list its processes: %s", local.session_id, exc)
                return False
    return False


def _start(ctx: SandboxContext, op: ProcStartOp) -> ProcessInfo:
    """Start the op's command in the background (with the session's env); its handle."""
    request, info = op.request, ctx.session
    if info.env:
        request = request.model_copy(update={"env": {**info.env, **request.env}})
    started = start_process(ctx.backend, ctx.sandbox, request)
    return started.model_copy(update={"node": ctx.node})


def proc_turn(
    sessions: SessionTable, backend_for: BackendFor, job: TurnJob, node: str
) -> _ProcResult:
    """Run a ``ProcOp`` in the session's sandbox here; its result.

    Raises:
        SandboxLost: ``process_lost``, the handle's sandbox is not here.
        NotFound: no such process in the sandbox (the agent's ``not_found``).
    """
    op = job.op
    assert isinstance(op, ProcOp)
    local = sessions.get(job.session.id)
    if local is None or not _holds(sessions, local, op):
        return _gone(job, op, node)
    with local.gate.turn():
        # Looked at again: the idle reaper may have released it while we waited.
        if not _holds(sessions, local, op):
            return _gone(job, op, node)
        try:
            return _apply(backend_for(local.sandbox_type), local, op, node)
        except SandboxLost as exc:
            raise _lost(job, op, node) from exc
        finally:
            local.last_used = time.monotonic()  # a session being steered is not idle


def _holds(sessions: SessionTable, local: LocalSession, op: ProcOp) -> bool:
    """Whether ``local`` is still the session's here, in a usable sandbox, the handle's."""
    sbx = local.sandbox
    return (
        sessions.get(local.session_id) is local
        and sbx.state in ("warm", "leased")
        and (not op.sandbox or op.sandbox in (sbx.id, *sbx.lineage))
    )


def _gone(job: TurnJob, op: ProcOp, node: str) -> ProcessList:
    """The answer when the processes' sandbox is not here: an empty listing, or lost."""
    if op.action == "list":
        return ProcessList(processes=[])
    raise _lost(job, op, node)


def _apply(backend: SandboxManager, local: LocalSession, op: ProcOp, node: str) -> _ProcResult:
    sbx, pid = local.sandbox, op.pid or 0
    local.dirty = True
    if op.action == "list":
        procs = [p.model_copy(update={"node": node}) for p in processes(backend, sbx)]
        return ProcessList(processes=procs)
    if op.action == "logs":
        return process_logs(backend, sbx, pid, op.since)
    if op.action == "stdin":
        return StdinResult(written=process_stdin(backend, sbx, pid, op.data, op.eof))
    if op.action == "kill":
        info = process_kill(backend, sbx, pid, op.signal)
    else:
        info = process_wait(backend, sbx, pid, op.timeout_s)
    return info.model_copy(update={"node": node})


def _lost(job: TurnJob, op: ProcOp, node: str) -> SandboxLost:
    return SandboxLost(
        f"background process {op.pid} of session {job.session.id} is lost: its sandbox "
        f"{op.sandbox or '?'} is no longer on node {node} (closed, lost, released or replaced)",
        code=ErrorCode.PROCESS_LOST,
        operation=f"processes.{op.action}",
        context={"pid": op.pid, "sandbox": op.sandbox, "node": node, "ran": False},
    )


def _quick(ctx: TurnContext, op: ProcOp) -> _ProcResult:
    return proc_turn(ctx.parts.sessions, ctx.parts.backend_for, ctx.job, ctx.node)


HANDLERS = (SandboxHandler(ProcStartOp, _start), NodeHandler(ProcOp, _quick))
"""The process family's handlers: a start needs the sandbox, a quick op never brings it."""
