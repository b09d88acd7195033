"""What AgentScope's manager API costs over sandgrid's own exec, in one run.

    python3 bench/bench_agentscope.py [--turns 200]

Starts its own grid (API on 127.0.0.1:8739, one worker node, Redis db 11), then
times over one HTTP client on this machine, on warm sessions:

1. ``POST /v1/sessions/{id}/exec`` of ``shell="true"`` (sandgrid's own route);
2. ``POST /call_tool`` of ``run_shell_command`` ``true`` (AgentScope's route,
   answered as an MCP result): target p50 <= 1.2x the exec route's.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _grid import bench_grid
from _stats import pct

PORT = 8739
REDIS_URL = "redis://127.0.0.1:6379/11"
TOKEN = "tok-bench-" + "a" * 24
TARGET = 1.2


def timed(call: Callable[[], httpx.Response], n: int) -> list[float]:
    """Milliseconds of ``n`` calls, after 20 warm-up calls; each must answer 200."""
    out = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        r = call()
        ms = (time.perf_counter() - t0) * 1000
        assert r.status_code == 200, r.text
        if i >= 20:
            out.append(ms)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    args = ap.parse_args()
    with bench_grid(
        port=PORT, redis_url=REDIS_URL, token=TOKEN, nodes=["bench-as1"], concurrency=2
    ) as grid:
        h = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=grid.api_url, headers=h, timeout=60) as http:
            sid = http.post("/v1/sessions", json={"type": "python"}).json()["id"]
            box = http.post("/create_from_pool", json={"sandbox_type": "base"}).json()["data"]
            tool = {"identity": box, "tool_name": "run_shell_command"}
            exec_ms = timed(
                lambda: http.post(f"/v1/sessions/{sid}/exec", json={"shell": "true"}), args.turns
            )
            tool_ms = timed(
                lambda: http.post("/call_tool", json={**tool, "arguments": {"command": "true"}}),
                args.turns,
            )
            http.delete(f"/v1/sessions/{sid}")
            http.post("/release", json={"identity": box})
    e50, t50 = pct(exec_ms, 50), pct(tool_ms, 50)
    print(f"exec route       p50 {e50:7.2f} ms  p95 {pct(exec_ms, 95):7.2f} ms")
    print(f"call_tool route  p50 {t50:7.2f} ms  p95 {pct(tool_ms, 95):7.2f} ms")
    ratio = t50 / e50
    verdict = "ok" if ratio <= TARGET else "MISSED"
    print(f"call_tool / exec p50 = {ratio:.2f}x (target <= {TARGET}x): {verdict}")


if __name__ == "__main__":
    main()
