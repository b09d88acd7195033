"""``run_code``: one execution in the session's Jupyter kernel, through the kernel host.

The agent stays stdlib-only and serves one request at a time: it starts the
kernel host (``kernelhost``) lazily as the sandbox user in ``/workspace``, in
its own process group, writes it one JSON line per request and waits for one
line back under a deadline of its own. The host interrupts the kernel at the
request's timeout and kills it ``INTERRUPT_GRACE_S`` later; if the host itself
does not answer by ``reply_deadline`` (it hangs, or dies), the agent kills the
host and its kernel and answers ``kernel_restarted``. Between requests the host
and its kernel live on: ``exec``'s deadline kill spares the user processes that
were there before the command (``processes.kill_new``), so it spares them.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import threading
import time
from typing import IO, Any

from .errors import AgentError, Json, need
from .limits import BASE_ENV, WORKSPACE
from .location import module_command
from .processes import LEADERS, spawn
from .reaper import REAPER

__all__ = [
    "HOST_START_S",
    "INTERRUPT_GRACE_S",
    "KERNEL_ENV",
    "Host",
    "host_argv",
    "op_run_code",
    "reply_deadline",
]

INTERRUPT_GRACE_S = 2.0
"""How long an interrupted kernel has to go idle before it is killed and restarted."""
HOST_START_S = 25.0
"""Budget for starting the host and its kernel (the first call of a sandbox)."""
KERNEL_ENV = {
    # Kernel runtime files go to /tmp, out of the snapshotted home.
    "JUPYTER_RUNTIME_DIR": "/tmp/.sandgrid-jupyter",
    "IPYTHONDIR": "/tmp/.sandgrid-ipython",
    "MPLCONFIGDIR": "/tmp/.sandgrid-matplotlib",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
}


def reply_deadline(timeout: float) -> float:
    """Seconds the agent waits for the host's reply to a request of ``timeout``."""
    return timeout + INTERRUPT_GRACE_S + HOST_START_S + 1.0


def host_argv() -> tuple[list[str], str]:
    """The host's argv and the ``PYTHONPATH`` that finds this package (zipapp or checkout)."""
    return module_command("kernelhost")


class Host:
    """The running kernel host, if any (one per sandbox)."""

    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def alive(cls) -> bool:
        return cls.proc is not None and cls.proc.pid not in REAPER.status

    @classmethod
    def start(cls, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start the host as the sandbox user, in its own process group."""
        argv, path = host_argv()
        base = {k: v for k, v in os.environ.items() if not k.startswith("SANDGRID_")}
        full = {**base, **BASE_ENV, **KERNEL_ENV, **env, "PYTHONPATH": path}
        proc = spawn(argv, full, WORKSPACE, True)
        if proc.stderr is not None:  # the host sends its stderr to /dev/null itself
            proc.stderr.close()
        cls.proc = proc
        return proc

    @classmethod
    def kill(cls) -> None:
        """Kill the host's process group and its kernel's (the kernel leads its own)."""
        proc, cls.proc = cls.proc, None
        if proc is None:
            return
        LEADERS.discard(proc.pid)
        for pid in (proc.pid, *_children(proc.pid)):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        REAPER.kick()
        REAPER.wait(proc.pid, 1.0)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the kernel is the host's child)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def _read_line(pipe: IO[bytes], deadline: float) -> bytes | None:
    """One line from the host by ``deadline``; None on a timeout or EOF."""
    buf = bytearray()
    fd = pipe.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            buf += chunk
    return bytes(buf)


_CELLS = threading.Lock()  # one kernel: its cells run one at a time, as Jupyter's do


def op_run_code(req: Json) -> Json:
    """Run ``code`` in the kernel; the ``run_code`` reply.

    Cells of the session run one at a time; a cell's ``timeout`` counts from
    its arrival, so one that waits for the cell before it has what is left of
    it, and is refused (``session_busy``) when nothing is: the worker's
    deadline for the reply always holds.
    """
    code = need(req, "code", str)
    timeout = float(need(req, "timeout", (int, float)))
    cap = int(need(req, "output_cap", int))
    env = req.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise AgentError("invalid_input", "env must map names to strings", field="env")
    arrived = time.monotonic()
    if not _CELLS.acquire(timeout=max(timeout, 0.0)):
        raise AgentError(
            "session_busy", "the interpreter ran another cell for the whole timeout of this one"
        )
    try:
        return _run_cell(code, timeout - (time.monotonic() - arrived), cap, env)
    finally:
        _CELLS.release()


def _run_cell(code: str, timeout: float, cap: int, env: dict[str, str]) -> Json:
    start = time.monotonic()
    if not Host.alive():
        Host.kill()
        Host.start(env)
    proc = Host.proc
    assert proc is not None and proc.stdin is not None and proc.stdout is not None
    line = {"code": code, "timeout": timeout, "grace": INTERRUPT_GRACE_S, "cap": cap}
    try:
        proc.stdin.write(json.dumps(line).encode() + b"\n")
        proc.stdin.flush()
        raw = _read_line(proc.stdout, start + reply_deadline(timeout))
    except OSError:
        raw = None
    if raw is None:
        Host.kill()
        return _lost(start, timed_out=time.monotonic() - start >= timeout)
    reply: dict[str, Any] = json.loads(raw)
    if "failed" in reply:
        Host.kill()
        raise AgentError("sandbox_error", f"the kernel could not run: {reply['failed']}")
    return reply


def _lost(start: float, *, timed_out: bool) -> Json:
    """The reply when the host itself hung or died: its kernel is gone with it."""
    return {
        "stdout": "",
        "stderr": "",
        "error": {
            "name": "KernelRestarted",
            "value": "the kernel host did not answer: it was killed with its kernel",
            "traceback": [],
        },
        "timed_out": timed_out,
        "kernel_restarted": True,
        "duration_ms": round((time.monotonic() - start) * 1000, 3),
    }
