"""Egress proxy throughput and connection set-up, measured in one run (docs/network.md).

The proxied path is the one a sandbox's connection takes, in one process here:
client -> the agent's loopback relay (``worker.agent.egress``) -> the sandbox's
Unix socket -> the node's egress proxy (``worker.egress``, real Redis for the
policy and the audit) -> a loopback HTTP server on 127.0.0.8. The direct path
is the same client straight to the server. Prints MB/s of a bulk download and
the p50 of connect-to-first-byte of a tiny request, each with the ratio. The
downloads alternate direct and proxied ``--repeat`` times and the medians are
compared, so a burst of load from elsewhere on the host skews both alike.

    python3 bench/bench_egress.py [--mib 256] [--rounds 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers

from _services import shared_redis_url

from sandgrid.models import NetworkPolicy
from sandgrid.wire import names
from tests.support.egress_servers import free_port, http_server
from worker.agent.egress import serve_egress
from worker.egress import EgressProxy, RedisBook, Resolver
from worker.egress.handler import Handler

REDIS_URL = shared_redis_url(
    os.environ.get("SANDGRID_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
)
HOST = "127.0.0.8"
SID = "s-benchegress000000001"


def fetch(addr: tuple[str, int], request: bytes, first_byte_only: bool = False) -> int:
    """Send ``request``, read the answer to its end; the bytes read."""
    with socket.create_connection(addr) as s:
        s.sendall(request)
        total = 0
        while chunk := s.recv(1 << 20):
            total += len(chunk)
            if first_byte_only:
                break
    return total


def relay(path: Path) -> tuple[tuple[str, int], multiprocessing.Process]:
    """The agent's relay in a process of its own, as in a sandbox (not sharing our GIL)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.setblocking(False)
    proc = multiprocessing.get_context("fork").Process(
        target=serve_egress, args=(listener, str(path)), daemon=True
    )
    proc.start()
    return listener.getsockname(), proc


def throughput(addr: tuple[str, int], request: bytes) -> float:
    t0 = time.perf_counter()
    n = fetch(addr, request)
    return n / (time.perf_counter() - t0) / 1e6


def setup_p50(addr: tuple[str, int], request: bytes, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fetch(addr, request, first_byte_only=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5, help="bulk downloads each way")
    args = ap.parse_args()
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    policy = NetworkPolicy(allow=["files.test", HOST])
    r.hset(names.session_key(SID), "network", json.dumps(policy.model_dump(mode="json")))
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp:
        root = Path(tmp)
        (root / "big").write_bytes(os.urandom(1 << 20) * args.mib)
        (root / "tiny").write_bytes(b"x")
        port = free_port(HOST)
        handler = Handler(RedisBook(REDIS_URL), Resolver({"files.test": HOST}), "bench")
        egress = EgressProxy(handler, root / "egress")
        try:
            with http_server(HOST, port, root, root / "http.log"):
                sock = egress.open("bench", lambda: SID)
                proxied, proc = relay(sock)
                via = f"GET http://files.test:{port}/%s HTTP/1.0\r\n\r\n"
                try:
                    report(args, (HOST, port), proxied, via)
                finally:
                    proc.kill()
                    proc.join()
        finally:
            egress.stop()
            for key in (names.session_key(SID), names.egress_audit_key(SID)):
                r.delete(key)
            r.delete(names.egress_usage_key(SID))


def report(
    args: argparse.Namespace,
    direct: tuple[str, int],
    proxied: tuple[str, int],
    via: str,
) -> None:
    plain = "GET /%s HTTP/1.0\r\n\r\n"
    throughput(direct, (plain % "big").encode())  # warm the page cache
    ds, ps = [], []
    for _ in range(args.repeat):  # alternating, so load from elsewhere hits both alike
        ds.append(throughput(direct, (plain % "big").encode()))
        ps.append(throughput(proxied, (via % "big").encode()))
    d, p = statistics.median(ds), statistics.median(ps)
    print(
        f"bulk download {args.mib} MiB, median of {args.repeat}: direct {d:.0f} MB/s, "
        f"through the proxy {p:.0f} MB/s, ratio {p / d:.2f} (target >= 0.50)"
    )
    sd = setup_p50(direct, (plain % "tiny").encode(), args.rounds)
    sp = setup_p50(proxied, (via % "tiny").encode(), args.rounds)
    print(
        f"connect to first byte, p50 of {args.rounds}: direct {sd:.2f} ms, through the proxy "
        f"{sp:.2f} ms, overhead {sp - sd:.2f} ms"
    )


if __name__ == "__main__":
    main()
