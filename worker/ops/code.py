"""The worker's side of ``run_code``: the agent request, its deadline, the ``CodeResult``.

The kernel itself lives in the sandbox (``worker/agent/kernel.py`` starts the
kernel host, ``worker/agent/kernelhost.py`` runs it); here the request gets the
session's quotas (deadline, output cap) and environment, and the channel waits
as long as the agent may take: the request's timeout, the interrupt grace, the
budget for starting the kernel, and the usual margin. A channel that breaks
before that is a lost sandbox, as for ``exec``.
"""

from __future__ import annotations

import time
from typing import Any

from sandgrid.errors import SandboxError
from sandgrid.models import CodeRequest, CodeResult, Quotas
from sandgrid.ops.code import RunCodeOp
from worker.agent.kernel import reply_deadline
from worker.ops.base import SandboxContext, SandboxHandler
from worker.sandboxes import Sandbox, SandboxManager
from worker.sandboxes.manager import DEADLINE_MARGIN_S

__all__ = ["HANDLERS", "code_fields", "code_result", "run_code"]


def code_fields(req: CodeRequest, quotas: Quotas, env: dict[str, str]) -> dict[str, Any]:
    """The fields of a ``run_code`` agent request under these quotas."""
    return {
        "code": req.code,
        "timeout": req.timeout_s or quotas.timeout_s,
        "output_cap": quotas.output_bytes,
        "env": dict(env),
    }


def code_result(reply: dict[str, Any], *, node: str, timings: dict[str, float]) -> CodeResult:
    """The ``CodeResult`` of an agent's reply (unknown keys are ignored).

    Raises:
        SandboxError: the reply does not fit the model.
    """
    known = {k: reply[k] for k in CodeResult.model_fields if k in reply}
    try:
        return CodeResult(**{**known, "node": node, "timings": timings})
    except ValueError as exc:
        raise SandboxError(
            f"malformed run_code reply from the agent: {exc}", operation="run_code"
        ) from None


def run_code(
    backend: SandboxManager, sbx: Sandbox, req: CodeRequest, env: dict[str, str]
) -> CodeResult:
    """Run ``req`` in the sandbox's kernel; its outputs and flags.

    Raises:
        SandboxLost: the channel broke (the sandbox is lost, and its kernel with it).
        InvalidInput: the agent refused the request.
    """
    fields = code_fields(req, sbx.quotas, env)
    t0 = time.perf_counter()
    wait = reply_deadline(float(fields["timeout"])) + DEADLINE_MARGIN_S
    reply = backend.call(sbx, "run_code", fields, timeout=wait)
    timings = {"code_ms": round((time.perf_counter() - t0) * 1000, 3)}
    return code_result(reply, node=backend.node, timings=timings)


def _run_code(ctx: SandboxContext, op: RunCodeOp) -> CodeResult:
    return run_code(ctx.backend, ctx.sandbox, op.request, ctx.session.env)


HANDLERS = (SandboxHandler(RunCodeOp, _run_code, mutates=True),)
"""The code family's handlers."""
