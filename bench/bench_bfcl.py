"""BFCL multi-turn ground truth, all 800 entries, on the grid vs one after another on
the host: identical outputs, and both wall times.

    python3 bench/bench_bfcl.py [--per-category N] [--isolation lane] [--concurrency 8]

Starts its own grid (API on 127.0.0.1:8734, two worker nodes of four threads
serving the ``bfcl`` type, Redis db 10) and runs ``sandgrid bench bfcl`` against
it, which prints the table: entries, identical, grid wall, host wall, ratio.
Needs the ``sandgrid/sandbox-bfcl`` image (deploy/local/images.sh) and
``bfcl_eval`` on the host (deploy/local/python.sh).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import redis
from _services import grid_env, shared_redis_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandgrid.localgrid import SANDGRID, LocalGrid

PORT = 8734
REDIS_URL = shared_redis_url("redis://127.0.0.1:6379/10")
TOKEN = "tok-bench-bfcl-" + "w" * 24


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-category", type=int, default=None, help="default: all 200")
    ap.add_argument("--isolation", choices=["job", "lane"], default="lane")
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    with tempfile.TemporaryDirectory(prefix="bench-bfcl-") as tmp:
        grid = LocalGrid(
            Path(tmp) / "grid",
            port=PORT,
            redis_url=REDIS_URL,
            tenants={"bench": TOKEN},
            env={
                **grid_env(REDIS_URL),
                "SANDGRID_WORKER__POOL_SIZE": "2",
                "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            },
        )
        try:
            grid.start(["bf-w1", "bf-w2"], types="bfcl", concurrency=4)
            cmd = [
                *SANDGRID,
                "bench",
                "bfcl",
                "--isolation",
                args.isolation,
                "--concurrency",
                str(args.concurrency),
                "--workdir",
                str(Path(tmp) / "work"),
            ]
            if args.per_category:
                cmd += ["--per-category", str(args.per_category)]
            env = {**grid.env, "SANDGRID_TOKEN": TOKEN}
            done = subprocess.run(cmd, env=env, check=False)
            return done.returncode
        finally:
            grid.stop()
            r.flushdb()


if __name__ == "__main__":
    sys.exit(main())
