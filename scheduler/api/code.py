"""Route of the stateful code interpreter: ``POST /v1/sessions/{id}/code``.

A turn like any other (routing, the session's turn lock, snapshots after it);
its op runs the code in the session's Jupyter kernel, which the sandbox starts
on the first call and keeps between calls.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from sandgrid.models import CodeRequest, CodeResult
from sandgrid.ops.code import RunCodeOp
from sandgrid.wire.jobs import expect
from scheduler.api.deps import CurrentTenant, Services, Svc
from scheduler.tenants import Tenant
from scheduler.turns.admission import check_timeout

__all__ = ["KERNEL_START_S", "code_turn", "router", "run_code"]

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["code"])

KERNEL_START_S = 30.0
"""Added to the code's deadline for the turn's wait: the first call starts the kernel,
and an interrupted kernel has a grace period before it is restarted."""


@router.post("/code", response_model=CodeResult)
def run_code(
    session_id: str, body: CodeRequest, request: Request, svc: Svc, tenant: CurrentTenant
) -> CodeResult:
    """Run code in the session's kernel: variables, imports and definitions stay.

    An error in the code is a result (``error``), not an HTTP error; ``timed_out``
    and ``kernel_restarted`` say what the deadline did to the kernel.
    """
    return code_turn(svc, tenant, session_id, body, t0=request.state.t0)


def code_turn(
    svc: Services, tenant: Tenant, session_id: str, body: CodeRequest, *, t0: float | None = None
) -> CodeResult:
    """One ``run_code`` turn of the session (the route's and the MCP tool's)."""
    check_timeout(tenant, body.timeout_s)
    session = svc.registry.get(tenant.name, session_id)
    wait_s = (body.timeout_s or session.quotas.timeout_s) + KERNEL_START_S
    done = svc.runner.run(tenant, session, RunCodeOp(request=body), timeout_s=wait_s, t0=t0)
    result = expect(done.outcome, CodeResult, "run_code")
    timings = {**result.timings, **done.outcome.timings, **done.timings}
    return result.model_copy(update={"timings": timings, "node": done.outcome.node})
