"""A batch where every job gets a fresh sandbox, against ``docker run --rm`` of the same
jobs, in one run (issue 22's table: target >= 80% of ``docker run``'s rate).

    python3 bench/bench_fresh.py [--jobs 164] [--concurrency 8] [--rounds 2]

Starts its own grid (API on 127.0.0.1:8736, two worker nodes of four threads,
Redis db 12 or ``--redis-url``), then alternates, ``--rounds`` times each
(docker, grid, grid, docker, ...), so the shared machine's load falls on both:

1. grid: a batch of ``--jobs`` jobs (``python3 -c pass``) with ``--isolation
   job`` (each job in a sandbox of its own, destroyed after it) and
   ``--concurrency``, from ``POST /v1/batches`` to its end;
2. docker: the same jobs as ``docker run --rm --network none <image> python3 -c
   pass``, ``--concurrency`` at a time, from the first start to the last exit.

Prints each run's jobs/s, the medians, and the grid's rate as a share of
docker's beside the target.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _grid import bench_grid

from sandgrid.client import Client

PORT = 8736
REDIS_URL = "redis://127.0.0.1:6379/12"
TOKEN = "tok-bench-fresh-" + "f" * 24
IMAGE = "sandgrid/sandbox-python:latest"
JOB = ["python3", "-c", "pass"]
TARGET = 0.8


def grid_rate(client: Client, jobs: int, concurrency: int) -> float:
    """Jobs/s of one batch in job isolation, every job ok (else the run is refused)."""
    rows = [{"id": f"j{i}", "argv": JOB} for i in range(jobs)]
    t0 = time.perf_counter()
    info = client.create_batch(rows, isolation="job", concurrency=concurrency)  # type: ignore[arg-type]
    while info.state not in ("done", "cancelled"):
        time.sleep(0.1)
        info = client.get_batch(info.id)
    wall = time.perf_counter() - t0
    if info.ok != jobs:
        raise SystemExit(f"grid batch: {info.ok} of {jobs} jobs ok ({info.state})")
    return jobs / wall


def docker_rate(jobs: int, concurrency: int) -> float:
    """Jobs/s of ``docker run --rm`` of the same jobs, ``concurrency`` at a time."""
    cmd = ["docker", "run", "--rm", "--network", "none", IMAGE, *JOB]

    def one(_: int) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(jobs)))
    return jobs / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=164)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each, alternated")
    ap.add_argument("--redis-url", default=REDIS_URL)
    args = ap.parse_args()
    rates: dict[str, list[float]] = {"grid": [], "docker": []}
    with (
        bench_grid(
            port=PORT,
            redis_url=args.redis_url,
            token=TOKEN,
            nodes=["bf-w1", "bf-w2"],
            concurrency=4,
        ) as grid,
        Client(grid.api_url, TOKEN) as client,
    ):
        grid_rate(client, 16, args.concurrency)  # warm: both nodes serving, pools made
        for i in range(2 * args.rounds):
            first = "docker" if i % 4 in (0, 3) else "grid"
            if first == "docker":
                rate = docker_rate(args.jobs, args.concurrency)
            else:
                rate = grid_rate(client, args.jobs, args.concurrency)
            rates[first].append(rate)
            print(f"  run {i + 1}: {first:<6} {args.jobs} jobs, {rate:.2f} jobs/s")
    grid_p50, docker_p50 = (statistics.median(rates[k]) for k in ("grid", "docker"))
    share = grid_p50 / docker_p50
    verdict = "[target met]" if share >= TARGET else "[target MISSED]"
    print(
        f"fresh-sandbox batch (--isolation job, {args.jobs} jobs `python3 -c pass`, "
        f"concurrency {args.concurrency}, 2 nodes x 4 threads)"
    )
    print(f"  grid:   {grid_p50:.2f} jobs/s (median of {len(rates['grid'])})")
    print(f"  docker run --rm, same image, same concurrency: {docker_p50:.2f} jobs/s")
    print(f"  grid / docker run: {share:.0%} (target >= {TARGET:.0%}) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
