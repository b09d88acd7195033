"""Streamed output and cancel on a real grid: first-chunk latency and cancel latency.

    python bench/bench_stream.py [--runs 30]

Prints, from one run on one grid (API + one worker, runc):
- the end-to-end latency of a plain warm turn (``echo``), for scale;
- first chunk: for ``python3 -c "print('a', flush=True); import time;
  time.sleep(1); print('b')"``, when 'a' reaches the SDK's ``on_stdout``
  (from the call), and, with a variant that prints its write time, from the
  write to the callback (same host clock);
- cancel: from ``cancel()`` to the result (``cancelled: true``), p50 and p99.
"""

from __future__ import annotations

import argparse
import time

from _grid import bench_grid
from _stats import pct

from sandgrid.client import Client

TOKEN = "tok-bench-stream-" + "e" * 20
A_THEN_B = "print('a', flush=True); import time; time.sleep(1); print('b')"
STAMPED = "import time; print(time.time(), flush=True); time.sleep(1); print('b')"


def _ms(values: list[float]) -> str:
    return f"p50 {pct(values, 50):7.1f} ms  p99 {pct(values, 99):7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--port", type=int, default=8731)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args()
    with (
        bench_grid(
            port=args.port, redis_url=args.redis_url, token=TOKEN, nodes=["bs-w1"], concurrency=2
        ) as grid,
        Client(grid.api_url, TOKEN) as client,
        client.session(type="python") as s,
    ):
        s.exec(shell="true")  # warm: the session's sandbox is on its node
        plain, first, write_to_cb, cancel = [], [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            s.exec(shell="echo hi")
            plain.append((time.perf_counter() - t0) * 1000)
            got: list[float] = []
            t0 = time.perf_counter()
            s.exec(python=A_THEN_B, on_stdout=lambda t, got=got: got.append(time.perf_counter()))
            first.append((got[0] - t0) * 1000)
            stamps: list[float] = []
            s.exec(
                python=STAMPED,
                on_stdout=lambda t, s_=stamps: s_.append(time.time() - float(t)) if not s_ else 0,
            )
            write_to_cb.append(stamps[0] * 1000)
            stream = s.exec_stream(shell="echo started; sleep 1000", timeout_s=120)
            for event in stream:
                if event.type == "stdout":
                    break
            t0 = time.perf_counter()
            stream.cancel()
            assert stream.wait().cancelled
            cancel.append((time.perf_counter() - t0) * 1000)
    print(f"runs: {args.runs} (one grid, one warm session, runc)")
    print(f"plain warm turn (echo), end to end:      {_ms(plain)}")
    print(f"first chunk 'a', call -> on_stdout:      {_ms(first)}")
    print(f"first chunk, write -> on_stdout:         {_ms(write_to_cb)}")
    print(f"cancel -> result (cancelled: true):      {_ms(cancel)}")
    ratio = pct(write_to_cb, 50) / pct(plain, 50)
    print(f"ratio write->callback p50 / plain turn p50: {ratio:.2f}")


if __name__ == "__main__":
    main()
