"""The exec op on this node: one command in the session's sandbox, under its quotas.

The agent request (``exec_fields``: the argv, the deadline and output cap of
the quotas), the reply's ``ExecResult``, and the deadline held from the worker
side: the agent kills what the command started when its time is up and
answers within ``DEADLINE_MARGIN_S``; when it does not (a sandbox starved by
its own fork bomb under gVisor, say), the sandbox is killed from the host and
destroyed, and the answer is ``timed_out`` (the session continues from its
last snapshot in a fresh container).

An exec that a snapshot follows scans the workspace in the same request (the
``then`` of the request, ``Sandbox.scan_after_exec``: ``worker.sandboxes.files``
``scan_then`` and ``keep_scan``).
"""

from __future__ import annotations

import time
from typing import Any

from sandgrid.errors import SandboxLost
from sandgrid.models import ExecRequest, ExecResult, Quotas
from sandgrid.ops.exec import ExecOp
from worker.agent_client.client import ChunkCallback
from worker.egress.env import session_env
from worker.ops.base import SandboxContext, SandboxHandler
from worker.sandboxes import Sandbox, SandboxManager
from worker.sandboxes.files import keep_scan, scan_then
from worker.sandboxes.manager import DEADLINE_MARGIN_S

__all__ = [
    "ARG_CHUNK",
    "HANDLERS",
    "command_argv",
    "exec_command",
    "exec_fields",
    "exec_result",
    "run_exec",
]

ARG_CHUNK = 100_000
"""Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN): longer sources are split."""

_PY_JOIN = (
    "import sys;_s=''.join(sys.argv[1:]);sys.argv=['-c'];del sys;"
    "exec(compile(_s,'<string>','exec'))"
)
_SH_JOIN = 'eval "$(printf %s "$@")"'


# ---- the agent request and its reply --------------------------------------------


def _chunks(text: str) -> list[str]:
    return [text[i : i + ARG_CHUNK] for i in range(0, len(text), ARG_CHUNK)] or [""]


def command_argv(req: ExecRequest) -> list[str]:
    """The argv of a request: ``argv`` as is, ``shell`` via ``/bin/sh -c``,
    ``python`` via ``python3 -c``; sources over 100 kB travel as several
    arguments joined again in the sandbox."""
    if req.argv is not None:
        return list(req.argv)
    if req.shell is not None:
        if len(req.shell) <= ARG_CHUNK:
            return ["/bin/sh", "-c", req.shell]
        return ["/bin/sh", "-c", _SH_JOIN, "sh", *_chunks(req.shell)]
    source = req.python or ""
    if len(source) <= ARG_CHUNK:
        return ["python3", "-c", source]
    return ["python3", "-c", _PY_JOIN, *_chunks(source)]


def exec_fields(req: ExecRequest, quotas: Quotas, *, stream: bool) -> dict[str, Any]:
    """The fields of an ``exec`` request under these quotas (also of ``proc_start``)."""
    return {
        "argv": command_argv(req),
        "env": dict(req.env),
        "cwd": req.cwd,
        "stdin": req.stdin,
        "timeout": req.timeout_s or quotas.timeout_s,
        "output_cap": quotas.output_bytes,
        "stream": stream,
    }


def exec_result(reply: dict[str, Any], *, node: str, timings: dict[str, float]) -> ExecResult:
    """The ``ExecResult`` of an agent's exec reply (unknown keys are ignored)."""
    known = {k: reply[k] for k in ExecResult.model_fields if k in reply}
    return ExecResult(**known, node=node, timings=timings)


def _deadline_result(node: str, t0: float) -> ExecResult:
    ms = (time.perf_counter() - t0) * 1000
    return ExecResult(
        exit_code=None,
        stderr="sandgrid: the sandbox did not answer by the deadline and was destroyed; "
        "the session continues from its last snapshot\n",
        duration_ms=ms,
        timed_out=True,
        signal=9,
        node=node,
        timings={"exec_ms": ms},
    )


# ---- the op ---------------------------------------------------------------------


def exec_command(
    backend: SandboxManager,
    sbx: Sandbox,
    request: ExecRequest,
    on_chunk: ChunkCallback | None = None,
) -> ExecResult:
    """Run one command in the sandbox under its quotas.

    The deadline is ``request.timeout_s`` (else the quotas' ``timeout_s``);
    the agent kills everything the command started when it passes, and the
    channel waits ``DEADLINE_MARGIN_S`` longer before giving the sandbox up.

    Args:
        backend: the sandbox's backend.
        sbx: a warm or leased sandbox.
        request: the command.
        on_chunk: if given, output is streamed to it as ``(stream, text)``
            while the command runs (within the output cap).

    Returns:
        The result, with the truncation, timeout, OOM and workspace flags.

    Raises:
        SandboxLost: the channel broke (the user's code may have broken it).
        InvalidInput: bad cwd (outside the workspace), oversized request.
    """
    fields = exec_fields(request, sbx.quotas, stream=on_chunk is not None)
    deadline = float(fields["timeout"])
    then = scan_then(sbx)
    if then is not None:
        fields["then"] = {"op": "scan", **then.fields}
    t0 = time.perf_counter()
    try:
        reply = backend.call(
            sbx, "exec", fields, timeout=deadline + DEADLINE_MARGIN_S, on_chunk=on_chunk
        )
    except SandboxLost:
        if time.perf_counter() - t0 < deadline:
            raise  # broke before its time: not a deadline, the sandbox is lost
        backend.kill_at_deadline(sbx)
        return _deadline_result(backend.node, t0)
    timings = {"exec_ms": (time.perf_counter() - t0) * 1000}
    if then is not None:
        keep_scan(sbx, then, reply.pop("then", None))
    return exec_result(reply, node=backend.node, timings=timings)


def run_exec(ctx: SandboxContext, op: ExecOp) -> ExecResult:
    """The exec turn: the command with the session's environment (its egress proxy's
    too), streamed and cancellable by turn id when the node has the control."""
    request, info = op.request, ctx.session
    if info.env or info.network is not None:
        env = {**session_env(info), **info.env, **request.env}
        request = request.model_copy(update={"env": env})
    backend, sbx, control = ctx.backend, ctx.sandbox, ctx.parts.control
    if control is not None and ctx.turn_id:

        def run(on_chunk: ChunkCallback | None) -> ExecResult:
            return exec_command(backend, sbx, request, on_chunk)

        result = control.exec(run, request, ctx.turn_id, info.id)
    else:
        result = exec_command(backend, sbx, request)
    return result.model_copy(update={"node": ctx.node})


HANDLERS = (SandboxHandler(ExecOp, run_exec, mutates=True),)
"""The exec family's handlers."""
