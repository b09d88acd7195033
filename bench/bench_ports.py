"""Exposed ports through a real grid against the same requests made directly (docs/ports.md).

Run: ``PYTHONPATH=. python bench/bench_ports.py [--runs 200] [--mib 64] [--repeat 3]``.

One grid (API and one worker, ``python`` on runc), one session with
``python3 -m http.server`` on its loopback, and an identical server on the
host's loopback (127.0.0.1, the same files). In the same run it prints:

- a small GET through the port route (``Session.http``): p50, p99, and its
  p50 over a direct loopback GET on the host to the identical server (target:
  +3 ms or less), beside the API's own floor (a ``GET /v1/sessions/{id}``,
  which reaches no worker) and the same GET over a tunnel this process opens
  to the owning worker with the signed hello itself (worker and agent, no
  API), each request of the four kinds in turn (a load that changes during
  the run weighs on all alike); the same GET made from inside the sandbox
  with an exec (python's urllib) and a plain warm exec (``true``);
- a bulk download through the route (a preview URL) against the direct one:
  MB/s of each, medians of ``--repeat`` alternating rounds, and their ratio
  (target: 0.5 or more).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _grid import bench_grid
from _stats import pct
from bench_ports_relay import raw_get

from sandgrid.client import Client, Session
from sandgrid.localgrid import LocalGrid
from sandgrid.wire.portkeys import port_key
from sandgrid.wire.redis_ledger import RedisLedger
from sandgrid.wire.settings import Settings

TOKEN = "tok-bench-ports-" + "p" * 24
SMALL = b"x" * 512
IN_SANDBOX_GET = "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/small.txt').read()"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def host_server(directory: str) -> str:
    """An http.server like the sandbox's, on the host's loopback; its base URL."""
    handler = functools.partial(_Quiet, directory=directory)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_address[1]}/"


def _times(fn: object, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _in_turn(cases: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Milliseconds of each case, the cases one after the other in every round."""
    out: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            out[name].append((time.perf_counter() - t0) * 1000)
    return out


def _raw(grid: LocalGrid, session_id: str) -> Callable[[], None]:
    """A small GET over a tunnel to the session's owner opened with the hello itself."""
    with _environ(grid.env):
        key = port_key(Settings(), "link")
    client = redis.Redis.from_url(grid.env["SANDGRID_REDIS_URL"], decode_responses=True)
    ledger = RedisLedger(client, lease_ttl_s=60)
    info = ledger.get_any(session_id)
    record = ledger.node_record(info.owner) if info is not None and info.owner else None
    assert record is not None and record.ports_addr, "no owner with a port listener"
    host, _, port = record.ports_addr.rpartition(":")
    addr = (host.strip("[]"), int(port))
    return lambda: raw_get(addr, 8000, key, session_id)


@contextlib.contextmanager
def _environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _mbps(url: str, nbytes: int) -> float:
    t0 = time.perf_counter()
    got = 0
    with httpx.stream("GET", url, timeout=300) as r:
        for chunk in r.iter_raw(1 << 20):
            got += len(chunk)
    assert got == nbytes, (got, nbytes)
    return nbytes / (time.perf_counter() - t0) / 1e6


def _start(s: Session, mib: int) -> None:
    s.write_file("small.txt", SMALL)
    s.exec(shell=f"head -c {mib << 20} /dev/zero > /workspace/big.bin")
    s.exec(
        shell="cd /workspace && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True
    )
    with s.http(8000) as h:
        for _ in range(100):
            if h.get("small.txt").status_code == 200:
                return
            time.sleep(0.2)
    raise SystemExit("the sandbox's server never answered")


def _print_small(times: dict[str, list[float]], runs: int) -> None:
    """The small GET's figures, printed as soon as measured (a later phase may fail)."""
    route, host, floor, raw = (times[k] for k in ("route", "host", "floor", "raw"))
    print(f"small GET, {runs} runs, runc:")
    print(f"  through the route   p50 {pct(route, 50):6.2f} ms  p99 {pct(route, 99):6.2f} ms")
    print(f"  direct on the host  p50 {pct(host, 50):6.2f} ms  p99 {pct(host, 99):6.2f} ms")
    print(f"  route over direct   +{pct(route, 50) - pct(host, 50):.2f} ms p50 (target <= 3 ms)")
    print(f"  the API's own floor p50 {pct(floor, 50):6.2f} ms (GET /v1/sessions/{{id}}, no port)")
    print(f"  tunnel, no API      p50 {pct(raw, 50):6.2f} ms (the hello spoken by this process)")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--port", type=int, default=8733)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        bench_grid(
            port=args.port, redis_url=args.redis_url, token=TOKEN, nodes=["bp-w1"], concurrency=2
        ) as grid,
        Client(grid.api_url, TOKEN, timeout=300) as client,
        client.session(type="python") as s,
    ):
        Path(tmp, "small.txt").write_bytes(SMALL)
        Path(tmp, "big.bin").write_bytes(bytes(args.mib << 20))
        direct = host_server(tmp)
        _start(s, args.mib)
        with (
            s.http(8000) as routed,
            httpx.Client(base_url=direct) as plain,
            httpx.Client(base_url=grid.api_url, headers=client._headers()) as api,
        ):
            cases: dict[str, Callable[[], object]] = {
                "route": lambda: routed.get("small.txt").raise_for_status(),
                "host": lambda: plain.get("small.txt").raise_for_status(),
                "floor": lambda: api.get(f"/v1/sessions/{s.id}").raise_for_status(),
                "raw": _raw(grid, s.id),
            }
            _print_small(_in_turn(cases, args.runs), args.runs)
        inside = _times(lambda: s.exec(["python3", "-c", IN_SANDBOX_GET]), max(20, args.runs // 10))
        warm = _times(lambda: s.exec(shell="true"), max(20, args.runs // 10))
        preview = s.port_url(8000, read_only=True).url
        rounds = [
            (_mbps(direct + "big.bin", args.mib << 20), _mbps(preview + "big.bin", args.mib << 20))
            for _ in range(args.repeat)
        ]
    d_mbps = statistics.median(r[0] for r in rounds)
    p_mbps = statistics.median(r[1] for r in rounds)
    print(f"  exec'd in sandbox   p50 {pct(inside, 50):6.2f} ms (an exec of python's urllib)")
    print(f"  warm exec (true)    p50 {pct(warm, 50):6.2f} ms")
    print(f"bulk {args.mib} MiB, median of {args.repeat}:")
    print(
        f"  direct {d_mbps:7.1f} MB/s  route {p_mbps:7.1f} MB/s  ratio {p_mbps / d_mbps:.2f} "
        "(target >= 0.5)"
    )


if __name__ == "__main__":
    main()
