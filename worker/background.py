"""Background-process turns on this node: start one, or a quick op on the running ones.

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

from sandgrid.errors import ErrorCode, SandboxLost, SandgridError
from sandgrid.models import SessionInfo
from sandgrid.wire.jobs import ProcOp, ProcStartOp, TurnJob
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.pool import BackendFor
from worker.sessions.table import LocalSession, SessionTable

__all__ = ["keeps_resident", "proc_turn", "start_background"]

log = logging.getLogger(__name__)


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
                return backend.live_processes(sbx) > 0
            except SandgridError as exc:
                log.warning("session %s: cannot list its processes: %s", local.session_id, exc)
                return False
    return False


def start_background(
    backend: SandboxManager, sbx: Sandbox, op: ProcStartOp, info: SessionInfo, node: str
) -> dict[str, Any]:
    """Start the op's command in the background (with the session's env); its handle."""
    request = op.request
    if info.env:
        request = request.model_copy(update={"env": {**info.env, **request.env}})
    started = backend.start_process(sbx, request)
    return started.model_copy(update={"node": node}).model_dump(mode="json")


def proc_turn(
    sessions: SessionTable, backend_for: BackendFor, job: TurnJob, node: str
) -> dict[str, Any]:
    """Run a ``ProcOp`` in the session's sandbox here; its JSON result.

    Raises:
        SandboxLost: ``process_lost``, the handle's sandbox is not here.
        NotFound: no such process in the sandbox (the agent's ``not_found``).
    """
    op = job.op
    assert isinstance(op, ProcOp)
    local = sessions.get(job.session.id)
    if local is None or not _holds(sessions, local, op):
        return _gone(job, op, node)
    with local.lock:
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
        and (not op.sandbox or sbx.id == op.sandbox)
    )


def _gone(job: TurnJob, op: ProcOp, node: str) -> dict[str, Any]:
    """The answer when the processes' sandbox is not here: an empty listing, or lost."""
    if op.action == "list":
        return {"processes": []}
    raise _lost(job, op, node)


def _apply(backend: SandboxManager, local: LocalSession, op: ProcOp, node: str) -> dict[str, Any]:
    sbx, pid = local.sandbox, op.pid or 0
    local.dirty = True
    if op.action == "list":
        procs = [p.model_copy(update={"node": node}) for p in backend.processes(sbx)]
        return {"processes": [p.model_dump(mode="json") for p in procs]}
    if op.action == "logs":
        return backend.process_logs(sbx, pid, op.since).model_dump(mode="json")
    if op.action == "stdin":
        return {"written": backend.process_stdin(sbx, pid, op.data, op.eof)}
    if op.action == "kill":
        info = backend.process_kill(sbx, pid, op.signal)
    else:
        info = backend.process_wait(sbx, pid, op.timeout_s)
    return info.model_copy(update={"node": node}).model_dump(mode="json")


def _lost(job: TurnJob, op: ProcOp, node: str) -> SandboxLost:
    return SandboxLost(
        f"background process {op.pid} of session {job.session.id} is lost: its sandbox "
        f"{op.sandbox or '?'} is no longer on node {node} (closed, lost, released or replaced)",
        code=ErrorCode.PROCESS_LOST,
        operation=f"processes.{op.action}",
        context={"pid": op.pid, "sandbox": op.sandbox, "node": node, "ran": False},
    )
