"""Background processes on the scheduler side: start one, steer it, or say it is lost.

A start is a turn like an exec (``ProcStartOp``). The quick ops (``ProcOp``)
go to the node that holds the session, through the same turn flow (so they
take the session's turn lock like any turn: one at a time). When that node is
not alive, the processes died with it: the answer is ``process_lost`` at once,
without a message sent or a wait, and a listing is empty. The owning worker
answers ``process_lost`` itself when the handle's sandbox is no longer there.
"""

from __future__ import annotations

from typing import TypeVar

from sandgrid.errors import ErrorCode, SandboxLost
from sandgrid.models import ExecRequest, WireModel
from sandgrid.ops.processes import ProcOp, ProcStartOp
from sandgrid.processes import ProcessInfo, ProcessList
from sandgrid.wire.jobs import expect
from scheduler.tenants import Tenant
from scheduler.turns.admission import check_exec
from scheduler.turns.runner import TurnRunner

__all__ = ["process_op", "start_process"]

R = TypeVar("R", bound=WireModel)

_QUICK_TTL_S = 5.0
"""The deadline of a quick op's turn, before the runner's margin."""


def start_process(
    runner: TurnRunner,
    tenant: Tenant,
    session_id: str,
    request: ExecRequest,
    *,
    t0: float | None = None,
) -> ProcessInfo:
    """Start ``request`` in the background in the session's sandbox; its handle.

    Raises:
        LimitExceeded: the sandbox runs ``quotas.background_processes`` already.
        SandgridError: as an exec (closed, busy, invalid input, worker lost).
    """
    check_exec(tenant, request)
    session = runner.registry.get(tenant.name, session_id)
    done = runner.run(tenant, session, ProcStartOp(request=request), timeout_s=None, t0=t0)
    return expect(done.outcome, ProcessInfo, "proc_start")


def process_op(
    runner: TurnRunner, tenant: Tenant, session_id: str, op: ProcOp, model: type[R]
) -> R:
    """Run a quick op on the session's owning node; its result, a ``model``.

    Raises:
        SandboxLost: ``process_lost``, the session has no live owner (its node
            died, or it was released) or the owner holds another sandbox.
        NotFound: the sandbox has no such process.
    """
    session = runner.registry.get(tenant.name, session_id)
    owner = session.owner
    if session.state != "closed" and not (owner and runner.registry.node_alive(owner)):
        empty = ProcessList(processes=[])
        if op.action == "list" and isinstance(empty, model):
            return empty
        raise SandboxLost(
            f"background process {op.pid} of session {session_id} is lost: "
            + (f"its node {owner!r} is not alive" if owner else "no node holds the session"),
            code=ErrorCode.PROCESS_LOST,
            operation=f"processes.{op.action}",
            context={"pid": op.pid, "sandbox": op.sandbox, "node": owner, "ran": False},
        )
    ttl = op.timeout_s + _QUICK_TTL_S
    done = runner.run(tenant, session, op, timeout_s=ttl)
    return expect(done.outcome, model, f"processes.{op.action}")
