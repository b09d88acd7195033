"""The browser type through a real grid (docs/browser.md): start to first CDP answer, page turns.

Run: ``PYTHONPATH=. python bench/bench_browser.py [--sessions 3] [--runs 10]``.

One grid (API and one worker serving ``browser`` under runsc, warm pool of 4).
In the same run it prints:

- session start (a pool hit) to the first answer of ``GET /v1/sessions/{id}/cdp``
  (which starts Chromium in the sandbox), over ``--sessions`` sessions, beside the
  same call once the browser runs (the route's own cost);
- a navigate + screenshot round trip with Playwright over CDP through the port
  route (a page served in the sandbox), p50 over ``--runs``, beside a plain warm
  exec (``true``) of the same session.

A cold sandbox start (no pool) is not measured here yet.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _grid import bench_grid
from _stats import pct

from sandgrid.client import Client, Session

TOKEN = "tok-bench-browser-" + "b" * 24
PROBE = "import socket,time\nfor _ in range(300):\n    try:\n        socket.create_connection(('127.0.0.1', 8000), 1).close(); break\n    except OSError:\n        time.sleep(0.1)\n"  # noqa: E501


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _cdp(api: httpx.Client, sid: str) -> str:
    r = api.get(f"/v1/sessions/{sid}/cdp")
    r.raise_for_status()
    return str(r.json()["websocket_url"])


def _page_turns(s: Session, ws: str, headers: dict[str, str], runs: int) -> list[float]:
    s.write_file("index.html", "<title>bench</title><h1>bench</h1>")
    s.exec(
        shell="cd /workspace && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True
    )
    s.exec(["python3", "-c", PROBE])
    out = []
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(ws, headers=headers)
        page = browser.contexts[0].new_page()
        for _ in range(runs):
            t0 = time.perf_counter()
            page.goto("http://127.0.0.1:8000/index.html")
            page.screenshot()
            out.append(_ms(t0))
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--port", type=int, default=8734)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    starts, again = [], []
    with (
        bench_grid(
            port=args.port,
            redis_url=args.redis_url,
            token=TOKEN,
            nodes=["bb-w1"],
            concurrency=2,
            types="browser",
        ) as grid,
        Client(grid.api_url, TOKEN, timeout=300) as client,
        httpx.Client(base_url=grid.api_url, headers=headers, timeout=120) as api,
    ):
        time.sleep(5)  # the warm pool fills
        sessions = []
        for _ in range(args.sessions):
            t0 = time.perf_counter()
            s = client.session(type="browser", quotas={"memory_mb": 1024})
            ws = _cdp(api, s.id)
            starts.append(_ms(t0))
            t1 = time.perf_counter()
            _cdp(api, s.id)
            again.append(_ms(t1))
            sessions.append((s, ws))
        s, ws = sessions[0]
        turns = _page_turns(s, ws, headers, args.runs)
        warm = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            s.exec(shell="true")
            warm.append(_ms(t0))
        for s, _ in sessions:
            s.close()
    print(f"browser (runsc), {args.sessions} sessions:")
    print(f"  start (pool hit) to first CDP answer  median {statistics.median(starts):8.1f} ms")
    print(f"  GET /cdp, browser running             median {statistics.median(again):8.1f} ms")
    print(f"navigate + screenshot, {args.runs} runs (Playwright over CDP, the port route):")
    print(f"  p50 {pct(turns, 50):8.1f} ms  p99 {pct(turns, 99):8.1f} ms")
    ratio = pct(turns, 50) / pct(warm, 50)
    print(f"  warm exec (true) p50 {pct(warm, 50):8.1f} ms; ratio {ratio:.1f}x")


if __name__ == "__main__":
    main()
