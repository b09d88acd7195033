"""Interactive latency beside a batch: p99 of a warm session's turns, idle vs during
a 1,000-job batch, in one run, as a ratio (target <= 2x).

    python3 bench/bench_batch.py [--jobs 1000] [--isolation lane] [--samples 300] [--concurrency 16]

Starts its own grid (API on 127.0.0.1:8732, two worker nodes of four threads,
Redis db 11), then:

1. idle: ``--samples`` turns of ``true`` on a warm interactive session, one at a
   time, through SDK -> HTTP -> Celery -> worker -> sandbox;
2. busy: submits a batch of ``--jobs`` trivial jobs (``python3 -c pass``) on the
   batch queue and runs the same interactive turns until the batch is done;
3. prints p50/p95/p99 of both, the p99 ratio, and the batch's wall time and rate.

Why it holds: the scheduler keeps batch turns in flight under the sum of the
nodes' batch limits (three of four threads per node), so every node keeps a
free thread for the interactive session's direct queue.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _grid import bench_grid
from _stats import pct

from sandgrid.client import Client

PORT = 8732
REDIS_URL = "redis://127.0.0.1:6379/11"
TOKEN = "tok-bench-batch-" + "y" * 24
TARGET_RATIO = 2.0


PARTS = ("api_ms", "queue_ms", "worker_ms", "sandbox_ms")


def turns(
    session: object,
    n: int | None,
    stop: threading.Event | None = None,
    parts: dict[str, list[float]] | None = None,
) -> list[float]:
    """Latencies (ms) of ``true`` turns: ``n`` of them, or until ``stop`` is set."""
    out: list[float] = []
    while (n is None or len(out) < n) and not (stop is not None and stop.is_set()):
        t0 = time.perf_counter()
        r = session.exec(argv=["true"])  # type: ignore[attr-defined]
        out.append((time.perf_counter() - t0) * 1000)
        assert r.exit_code == 0, r
        for k in PARTS if parts is not None else ():
            parts.setdefault(k, []).append(r.timings.get(k, 0.0))
    return out


def run_batch(
    client: Client, jobs: int, isolation: str, concurrency: int, done: threading.Event
) -> dict[str, float]:
    rows = [{"id": f"j{i}", "argv": ["python3", "-c", "pass"]} for i in range(jobs)]
    t0 = time.perf_counter()
    info = client.create_batch(rows, isolation=isolation, concurrency=concurrency)  # type: ignore[arg-type]
    while info.state not in ("done", "cancelled"):
        time.sleep(0.25)
        info = client.get_batch(info.id)
    wall = time.perf_counter() - t0
    done.set()
    return {"wall_s": wall, "ok": info.ok, "errors": info.errors + info.failed}


def line(name: str, xs: list[float]) -> str:
    return (
        f"{name:<22} n={len(xs):<5} p50={pct(xs, 50):7.1f} ms  p95={pct(xs, 95):7.1f} ms  "
        f"p99={pct(xs, 99):7.1f} ms  mean={statistics.mean(xs):6.1f} ms"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--isolation", choices=["job", "lane"], default="lane")
    ap.add_argument("--samples", type=int, default=300, help="idle interactive turns")
    ap.add_argument("--concurrency", type=int, default=16, help="the batch's ceiling")
    args = ap.parse_args()
    with (
        bench_grid(
            port=PORT, redis_url=REDIS_URL, token=TOKEN, nodes=["bb-w1", "bb-w2"], concurrency=4
        ) as grid,
        Client(grid.api_url, TOKEN) as client,
        client.session() as s,
    ):
        turns(s, 30)  # warm: the session is live on its node
        idle_parts: dict[str, list[float]] = {}
        idle = turns(s, args.samples, parts=idle_parts)
        done = threading.Event()
        stats: dict[str, float] = {}
        with Client(grid.api_url, TOKEN) as batch_client:
            t = threading.Thread(
                target=lambda: stats.update(
                    run_batch(batch_client, args.jobs, args.isolation, args.concurrency, done)
                )
            )
            t.start()
            time.sleep(1.0)  # let the batch reach full speed
            busy_parts: dict[str, list[float]] = {}
            busy = turns(s, None, done, parts=busy_parts)
            t.join()
    ratio = pct(busy, 99) / pct(idle, 99)
    for name, parts in (("idle", idle_parts), ("busy", busy_parts)):
        means = "  ".join(f"{k}={statistics.mean(v):.1f}" for k, v in parts.items())
        print(f"  {name} breakdown (mean ms): {means}")
    print(f"interactive turn of `true` on a warm session, 2 nodes x 4 threads ({args.isolation})")
    print(line("idle", idle))
    print(line(f"during {args.jobs}-job batch", busy))
    print(
        f"batch: {args.jobs} jobs in {stats['wall_s']:.1f}s "
        f"({args.jobs / stats['wall_s']:.1f} jobs/s), ok={stats['ok']:.0f}, "
        f"not ok={stats['errors']:.0f}"
    )
    verdict = "OK" if ratio <= TARGET_RATIO else "ABOVE TARGET"
    print(f"p99 during / idle = {ratio:.2f}x (target <= {TARGET_RATIO:.0f}x): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
