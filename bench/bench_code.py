"""The stateful interpreter's turn against a plain exec of the same session, in one run.

    python3 bench/bench_code.py [--turns 60]

Starts its own grid (API on 127.0.0.1:8743, one worker node, Redis db 11), opens
one session, and through SDK -> HTTP -> Celery -> worker -> sandbox measures:

1. a warm ``exec`` of ``true`` (the baseline);
2. ``run_code`` of ``x = 1`` then ``x + 1`` (the kernel already started), each call;

and prints the p50/p99 of both and the ratio of the p50s (target: <= 2x).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _grid import bench_grid
from _stats import pct

from sandgrid.client import Client, Session

PORT = 8743
REDIS_URL = "redis://127.0.0.1:6379/11"
TOKEN = "tok-bench-code-" + "x" * 20


def timed(fn: Callable[[], object], n: int) -> list[float]:
    """Milliseconds of each of ``n`` calls."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def measure(s: Session, turns: int) -> tuple[list[float], list[float]]:
    """(exec ms, run_code ms), interleaved in rounds so both see the same machine."""
    s.exec(["true"])
    s.run_code("x = 0")  # starts the kernel: not measured
    execs: list[float] = []
    codes: list[float] = []
    for _ in range(turns // 2):
        execs += timed(lambda: s.exec(["true"]), 2)
        t0 = time.perf_counter()
        s.run_code("x = 1")
        codes.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        r = s.run_code("x + 1")
        codes.append((time.perf_counter() - t0) * 1000)
        assert r.result == "2", r
    return execs, codes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    with (
        bench_grid(port=PORT, redis_url=REDIS_URL, token=TOKEN, nodes=["bc-w1"], concurrency=2),
        Client(f"http://127.0.0.1:{PORT}", TOKEN) as client,
        client.session(type="python") as s,
    ):
        execs, codes = measure(s, args.turns)
    e50, c50 = pct(execs, 50), pct(codes, 50)
    print(
        f"warm exec `true`          p50 {e50:8.2f} ms  p99 {pct(execs, 99):8.2f} ms  n={len(execs)}"
    )
    print(
        f"run_code x=1 / x+1        p50 {c50:8.2f} ms  p99 {pct(codes, 99):8.2f} ms  n={len(codes)}"
    )
    print(f"ratio run_code/exec p50   {c50 / e50:.2f}x   (target <= 2x)")


if __name__ == "__main__":
    main()
