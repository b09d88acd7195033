"""The worker side of background processes: the agent's ``proc_*`` ops over ``call``.

A mixin of ``SandboxManager`` (like ``SnapshotOps``): each method is one quick
agent request, checked here and turned into ``sandgrid.processes`` models.
The per-sandbox limit (``Quotas.background_processes``) is enforced by the
agent, which counts what runs; a refusal becomes ``LimitExceeded``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from sandgrid.errors import LimitExceeded
from sandgrid.models import ExecRequest
from sandgrid.processes import MAX_PROC_WAIT_S, ProcessInfo, ProcessLogs
from worker.agent_api import exec_fields

if TYPE_CHECKING:
    from worker.sandboxes.handle import Sandbox

__all__ = ["BackgroundOps"]

_QUICK_S = 10.0
"""The channel deadline of a quick op (a wait adds its own timeout)."""


class BackgroundOps:
    """``start_process``, ``processes``, ``process_logs``, ``process_stdin``,
    ``process_kill``, ``process_wait`` over ``call``."""

    @abstractmethod
    def call(
        self, sbx: Sandbox, op: str, fields: dict[str, Any], *, timeout: float = ...
    ) -> dict[str, Any]:
        """One agent request (``SandboxManager.call``)."""

    def start_process(self, sbx: Sandbox, request: ExecRequest) -> ProcessInfo:
        """Start ``request`` in the background as the sandbox user; answer at once.

        Raises:
            LimitExceeded: ``quotas.background_processes`` already run.
            InvalidInput: bad cwd or argv (the command cannot be started).
        """
        fields = exec_fields(request, sbx.quotas, stream=False)
        fields.update(max_live=sbx.quotas.background_processes)
        reply = self.call(sbx, "proc_start", fields, timeout=_QUICK_S)
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

    def processes(self, sbx: Sandbox) -> list[ProcessInfo]:
        """Every background process the sandbox keeps, running or finished."""
        reply = self.call(sbx, "proc_list", {}, timeout=_QUICK_S)
        return [_info(sbx, p) for p in reply["processes"]]

    def live_processes(self, sbx: Sandbox) -> int:
        """How many background processes still run (the idle reaper asks)."""
        return sum(1 for p in self.processes(sbx) if p.running)

    def process_logs(self, sbx: Sandbox, pid: int, since: int = 0) -> ProcessLogs:
        """Output from the absolute offset ``since`` (see ``ProcessLogs``)."""
        reply = self.call(sbx, "proc_logs", {"pid": pid, "since": since}, timeout=_QUICK_S)
        return ProcessLogs(pid=pid, **reply)

    def process_stdin(self, sbx: Sandbox, pid: int, data: str, eof: bool = False) -> int:
        """Write to the process's stdin (never blocking); how many bytes it took."""
        fields = {"pid": pid, "data": data, "eof": eof}
        return int(self.call(sbx, "proc_stdin", fields, timeout=_QUICK_S)["written"])

    def process_kill(self, sbx: Sandbox, pid: int, signal: str = "TERM") -> ProcessInfo:
        """Send ``signal`` to the process's group."""
        reply = self.call(sbx, "proc_kill", {"pid": pid, "signal": signal}, timeout=_QUICK_S)
        reply.pop("signalled", None)
        return _info(sbx, reply)

    def process_wait(self, sbx: Sandbox, pid: int, timeout: float) -> ProcessInfo:
        """Wait up to ``timeout`` (at most ``MAX_PROC_WAIT_S``) for the process to end."""
        timeout = min(max(timeout, 0.0), MAX_PROC_WAIT_S)
        fields = {"pid": pid, "timeout": timeout}
        return _info(sbx, self.call(sbx, "proc_wait", fields, timeout=timeout + _QUICK_S))


def _info(sbx: Sandbox, reply: dict[str, Any]) -> ProcessInfo:
    return ProcessInfo(**reply, sandbox=sbx.id)
