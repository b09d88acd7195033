"""The browser type through a real grid (docs/browser.md): start to first CDP answer, page turns.

Run: ``PYTHONPATH=. python bench/bench_browser.py [--sessions 3] [--runs 10] [--cold 3]``.

Two grids, one after the other (API and one worker serving ``browser`` under
runsc). In the same run it prints:

- a cold start: with no warm pool (``SANDGRID_WORKER__POOL_SIZE=0``), a session
  created and its first answer of ``GET /v1/sessions/{id}/cdp`` (the sandbox's
  start, the agent's, then Chromium's), median of ``--cold``, beside its
  baseline measured alternately in the same window: ``docker run`` of the same
  image under runsc (no network) starting the same Chromium and polling its
  DevTools port to the first ``/json/version`` answer, then exiting;
- with a warm pool of 4: session start (a pool hit) to the first answer of
  ``GET /cdp`` (which starts Chromium in the sandbox), over ``--sessions``
  sessions, beside the same call once the browser runs (the route's own cost);
- a navigate + screenshot round trip with Playwright over CDP through the port
  route (a page served in the sandbox), p50 over ``--runs``, beside a plain warm
  exec (``true``) of the same session.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _grid import bench_grid
from _stats import pct

from sandgrid.client import Client, Session
from sandgrid.wire.browser import BROWSER_IMAGE

TOKEN = "tok-bench-browser-" + "b" * 24
PROBE = "import socket,time\nfor _ in range(300):\n    try:\n        socket.create_connection(('127.0.0.1', 8000), 1).close(); break\n    except OSError:\n        time.sleep(0.1)\n"  # noqa: E501


#: Chromium started as the image's launcher starts it, polled to its first DevTools answer.
DOCKER_PROBE = """
import subprocess, time, urllib.request
p = subprocess.Popen(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
    "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=9222",
    "--user-data-dir=/tmp/profile", "about:blank"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while True:
    try:
        urllib.request.urlopen("http://127.0.0.1:9222/json/version", timeout=1).read()
        break
    except OSError:
        time.sleep(0.02)
p.kill()
"""


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


def _docker_cold() -> float:
    """``docker run`` of the browser image under runsc to Chromium's first DevTools answer."""
    t0 = time.perf_counter()
    run = ["docker", "run", "--rm", "--runtime=runsc", "--network=none", BROWSER_IMAGE]
    subprocess.run(
        [*run, "python3", "-c", DOCKER_PROBE],
        check=True,
        capture_output=True,
    )
    return _ms(t0)


def _cold(
    args: argparse.Namespace, headers: dict[str, str]
) -> tuple[list[float], list[float], list[float]]:
    """Cold creates to the first CDP answer (no warm pool), alternated with ``docker run``;
    and the creates alone (a cold one takes seconds, a pool hit milliseconds)."""
    grid_ms, docker_ms, create_ms = [], [], []
    with (
        bench_grid(
            port=args.port,
            redis_url=args.redis_url,
            token=TOKEN,
            nodes=["bbc-w1"],
            concurrency=2,
            types="browser",
            pool_size=0,
        ) as grid,
        Client(grid.api_url, TOKEN, timeout=300) as client,
        httpx.Client(base_url=grid.api_url, headers=headers, timeout=120) as api,
    ):
        for _ in range(args.cold):
            docker_ms.append(_docker_cold())
            t0 = time.perf_counter()
            s = client.session(type="browser", quotas={"memory_mb": 1024})
            create_ms.append(_ms(t0))
            _cdp(api, s.id)
            grid_ms.append(_ms(t0))
            s.close()
    return grid_ms, docker_ms, create_ms


def main() -> None:
    args = _args()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    cold, docker, creates = _cold(args, headers)
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
        sessions, starts, hits, again = _starts(client, api, args.sessions)
        s, ws = sessions[0]
        turns = _page_turns(s, ws, headers, args.runs)
        warm = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            s.exec(shell="true")
            warm.append(_ms(t0))
        for s, _ in sessions:
            s.close()
    print(f"browser (runsc), cold start (no warm pool), {args.cold} runs alternated:")
    print(f"  session create to first CDP answer    median {statistics.median(cold):8.1f} ms")
    print(f"  docker run to first DevTools answer   median {statistics.median(docker):8.1f} ms")
    print(f"  ratio {statistics.median(cold) / statistics.median(docker):.2f}x")
    print(f"  of which the create (cold)            median {statistics.median(creates):8.1f} ms")
    print(f"browser (runsc), {args.sessions} sessions:")
    print(f"  start (pool hit) to first CDP answer  median {statistics.median(starts):8.1f} ms")
    print(f"  of which the create (a pool hit)      median {statistics.median(hits):8.1f} ms")
    print(f"  GET /cdp, browser running             median {statistics.median(again):8.1f} ms")
    print(f"navigate + screenshot, {args.runs} runs (Playwright over CDP, the port route):")
    print(f"  p50 {pct(turns, 50):8.1f} ms  p99 {pct(turns, 99):8.1f} ms")
    ratio = pct(turns, 50) / pct(warm, 50)
    print(f"  warm exec (true) p50 {pct(warm, 50):8.1f} ms; ratio {ratio:.1f}x")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--port", type=int, default=8734)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    return parser.parse_args()


def _starts(
    client: Client, api: httpx.Client, n: int
) -> tuple[list[tuple[Session, str]], list[float], list[float], list[float]]:
    """``n`` browser sessions from the warm pool: (the sessions and their CDP URLs, ms to
    the first CDP answer, ms of the create alone, ms of a second ``GET /cdp``)."""
    sessions, starts, hits, again = [], [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        s = client.session(type="browser", quotas={"memory_mb": 1024})
        hits.append(_ms(t0))
        ws = _cdp(api, s.id)
        starts.append(_ms(t0))
        t1 = time.perf_counter()
        _cdp(api, s.id)
        again.append(_ms(t1))
        sessions.append((s, ws))
    return sessions, starts, hits, again


if __name__ == "__main__":
    main()
