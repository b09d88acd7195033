"""Terminal benchmark: keystroke echo through the agent's ``pty`` op, against a warm exec.

Run: ``python3 bench/bench_pty.py [--runtimes runc,runsc] [--runs 200]``.

Prints, per runtime, p50/p99 of:

- echo: one character typed (``AgentClient.notify`` of ``pty_input``) until
  the terminal's echo of it comes back as a chunk (``cat`` in raw mode runs in
  the shell, so the echo is the pty's own);
- exec: a warm exec of ``true`` on the same sandbox (the channel's round trip);

and their ratio, measured in the same run: what one keystroke costs next to
one turn's floor.
"""

from __future__ import annotations

import argparse
import base64
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _stats import pct

from sandgrid.models import ExecRequest
from worker.ops.exec import exec_command
from worker.runtimes import runtime_for
from worker.sandboxes import Sandbox, SandboxManager


def _echo_times(backend: SandboxManager, sbx: Sandbox, runs: int) -> list[float]:
    got = threading.Event()
    seen: list[str] = []

    def chunk(_stream: str, text: str) -> None:
        seen.append(text)
        got.set()

    fields = {"rows": 24, "cols": 80, "idle_s": 60, "max_s": 120}
    call = threading.Thread(
        target=lambda: backend.call(sbx, "pty", fields, timeout=130, on_chunk=chunk), daemon=True
    )
    call.start()
    channel = sbx.channel
    assert channel is not None

    def type_(text: str) -> None:
        channel.notify("pty_input", {"data_b64": base64.b64encode(text.encode()).decode()})

    time.sleep(1.0)
    type_("stty -echo; exec cat\n")  # cat echoes what it reads: one chunk per key
    time.sleep(1.0)
    times = []
    for _ in range(runs):
        got.clear()
        t0 = time.perf_counter()
        type_("x\n")
        if not got.wait(5):
            raise RuntimeError("no echo")
        times.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.005)
    channel.notify("pty_close", {})
    call.join(10)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtimes", default="runc,runsc")
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    for runtime in args.runtimes.split(","):
        backend = SandboxManager(runtime_for(runtime), node="bench-pty")
        sbx = backend.create("python")
        try:
            echo = _echo_times(backend, sbx, args.runs)
            execs = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                exec_command(backend, sbx, ExecRequest(argv=["true"]))
                execs.append((time.perf_counter() - t0) * 1000)
        finally:
            backend.destroy(sbx)
        e50, e99, x50, x99 = pct(echo, 50), pct(echo, 99), pct(execs, 50), pct(execs, 99)
        print(
            f"{runtime}: keystroke echo p50 {e50:.2f} ms p99 {e99:.2f} ms | "
            f"exec true p50 {x50:.2f} ms p99 {x99:.2f} ms | echo/exec p50 {e50 / x50:.2f}x"
        )


if __name__ == "__main__":
    main()
