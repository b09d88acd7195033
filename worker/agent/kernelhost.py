"""The kernel host: a long-lived process, run as the sandbox user, that owns the Jupyter kernel.

The agent (PID 1, root, ``python3 -I``, stdlib only) cannot use jupyter_client,
and the kernel must run as the sandbox user anyway; so ``worker/agent/kernel.py``
starts this module lazily with ``python3 -m <package>.kernelhost`` (the zipapp on
``PYTHONPATH``), as uid 1000 in ``/workspace``, and speaks JSON lines with it on
its stdin and stdout: one request ``{"code", "timeout", "grace", "cap"}``, one
reply. jupyter_client is imported only here, inside the sandbox's own Python, and
the kernel's ZeroMQ sockets are on the sandbox's loopback (its only network).

Deadlines: at ``timeout`` the kernel is interrupted (SIGINT: its state stays);
if it is not idle ``grace`` seconds later it is killed (``kernel_restarted``) and
a fresh one starts with the next request. A kernel that dies on its own is
reported the same way. ``MARKER`` (in the user's home, which snapshots hold)
says that this session had a kernel before: a host that starts where the marker
is, is in a fresh sandbox of such a session, so its first reply says
``kernel_restarted`` (kernel state is never part of a snapshot).

The message collection (``Collector``) is pure, so it is unit-tested without a
kernel; this module imports no jupyter_client at import time.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import sys
import time
from typing import Any

__all__ = ["MARKER", "START_TIMEOUT_S", "Collector", "KernelHost", "main", "strip_ansi"]

MARKER = "/home/sandbox/.sandgrid/kernel"
"""Written when a kernel first starts in a session; it travels in the session's snapshots."""
START_TIMEOUT_S = 20.0
_POLL_S = 0.2
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """IPython colours its tracebacks; an API answer wants plain text."""
    return _ANSI.sub("", text)


class Collector:
    """The outputs of one execution, from its iopub messages, under one cap per output."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.streams = {"stdout": "", "stderr": ""}
        self.truncated = {"stdout": False, "stderr": False, "result": False, "display": False}
        self.result: str | None = None
        self.display: list[dict[str, str]] = []
        self.display_size = 0
        self.error: dict[str, Any] | None = None
        self.execution_count: int | None = None
        self.idle = False

    def feed(self, msg: dict[str, Any]) -> None:
        """Take one iopub message of this execution."""
        kind, content = msg.get("msg_type") or msg["header"]["msg_type"], msg.get("content", {})
        if kind == "status":
            self.idle = content.get("execution_state") == "idle"
        elif kind == "execute_input":
            self.execution_count = content.get("execution_count")
        elif kind == "stream":
            self._stream(content.get("name", "stdout"), content.get("text", ""))
        elif kind == "execute_result":
            data = dict(content.get("data", {}))
            text = str(data.pop("text/plain", ""))
            self.result = text[: self.cap]
            self.truncated["result"] = len(text) > self.cap
            self.execution_count = content.get("execution_count", self.execution_count)
            if data:
                self._display(data)
        elif kind in ("display_data", "update_display_data"):
            self._display(content.get("data", {}))
        elif kind == "error":
            self.error = {
                "name": str(content.get("ename", "")),
                "value": str(content.get("evalue", "")),
                "traceback": [strip_ansi(str(t)) for t in content.get("traceback", [])],
            }

    def _stream(self, name: str, text: str) -> None:
        name = "stderr" if name == "stderr" else "stdout"
        room = self.cap - len(self.streams[name])
        if len(text) > room:
            self.truncated[name] = True
        self.streams[name] += text[: max(room, 0)]

    def _display(self, data: dict[str, Any]) -> None:
        bundle = {m: v if isinstance(v, str) else json.dumps(v) for m, v in data.items()}
        size = sum(len(v) for v in bundle.values())
        if self.display_size + size > self.cap:
            self.truncated["display"] = True
            return
        self.display_size += size
        self.display.append(bundle)

    def reply(self) -> dict[str, Any]:
        """The outputs as the ``run_code`` reply holds them."""
        return {
            "stdout": self.streams["stdout"],
            "stderr": self.streams["stderr"],
            "stdout_truncated": self.truncated["stdout"],
            "stderr_truncated": self.truncated["stderr"],
            "result": self.result,
            "result_truncated": self.truncated["result"],
            "display": self.display,
            "display_truncated": self.truncated["display"],
            "error": self.error,
            "execution_count": self.execution_count,
        }


class KernelHost:
    """One kernel at a time: started on demand, interrupted, killed, reported."""

    def __init__(self) -> None:
        self.km: Any = None
        self.kc: Any = None
        self.lost = os.path.exists(MARKER)
        """A kernel's state was lost and no reply has said so yet."""

    def _start(self) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3", transport="tcp", ip="127.0.0.1")
        self.km.start_kernel(
            cwd=os.getcwd(), extra_arguments=["--HistoryManager.enabled=False", "--quiet"]
        )
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=START_TIMEOUT_S)
        os.makedirs(os.path.dirname(MARKER), exist_ok=True)
        with open(MARKER, "w") as f:
            f.write("a Jupyter kernel ran in this session\n")

    def _stop(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            with contextlib.suppress(Exception):  # already gone: nothing to stop
                self.km.shutdown_kernel(now=True)
        self.km = self.kc = None

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        """Execute ``req["code"]``; the reply (outputs, flags, ``kernel_restarted``)."""
        if self.km is not None and not self.km.is_alive():
            self._stop()
            self.lost = True
        if self.km is None:
            self._start()
        restarted, self.lost = self.lost, False
        start = time.monotonic()
        out = Collector(int(req["cap"]))
        timed_out, killed = self._collect(out, str(req["code"]), start, req)
        reply = out.reply()
        if killed:
            self._stop()
        reply.update(
            timed_out=timed_out,
            kernel_restarted=restarted or killed,
            duration_ms=round((time.monotonic() - start) * 1000, 3),
        )
        return reply

    def _collect(
        self, out: Collector, code: str, start: float, req: dict[str, Any]
    ) -> tuple[bool, bool]:
        """Gather this execution's messages until idle: (timed out, kernel killed)."""
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False)
        soft = start + float(req["timeout"])
        hard = soft + float(req["grace"])
        interrupted = False
        while not out.idle:
            now = time.monotonic()
            if not interrupted and now >= soft:
                self.km.interrupt_kernel()
                interrupted = True
            if now >= hard:
                _kernel_gone(out, "the kernel did not stop after an interrupt: it was restarted")
                return True, True
            try:
                msg = self.kc.get_iopub_msg(timeout=min(_POLL_S, max(hard - now, 0.01)))
            except queue.Empty:
                if not self.km.is_alive():
                    _kernel_gone(out, "the kernel died (out of memory, or it exited)")
                    return interrupted, True
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                out.feed(msg)
        return interrupted, False


def _kernel_gone(out: Collector, why: str) -> None:
    out.error = {"name": "KernelRestarted", "value": why, "traceback": []}


def main() -> int:
    """Serve JSON-line requests on stdin until EOF (the agent closed the pipe)."""
    os.environ.pop("PYTHONPATH", None)  # the kernel must not import the agent
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)  # nobody reads the host's (and its kernel's) stderr
    os.close(devnull)
    host = KernelHost()
    try:
        for line in sys.stdin:
            try:
                reply = host.run(json.loads(line))
            except Exception as exc:
                host._stop()
                reply = {"failed": f"{type(exc).__name__}: {exc}", "kernel_restarted": True}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        host._stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
