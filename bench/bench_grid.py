"""End-to-end turn latency and throughput of the grid, in one run.

    python3 bench/bench_grid.py [--turns 300] [--sessions 16] [--seconds 10]

Starts its own grid (API on 127.0.0.1:8731, two worker nodes, Redis db 13 or
``SANDGRID_BENCH_REDIS_URL``),
then measures on this machine, in one run:

1. a warm session's turn of ``true`` through SDK -> HTTP -> Celery -> worker ->
   sandbox, with the breakdown the API reports (api, queue, worker, sandbox),
   against the backend channel alone (``worker.ops.exec.exec_command`` of ``true`` on a
   warm sandbox): target p50 <= 2.5x the channel's;
2. the Docker SDK's ``exec_run("true")`` on a warm container of the same image
   (what a ``docker exec`` grid pays per call);
3. throughput: turns per second of many sessions over the two workers, against
   the rate at which the same Celery app and broker round-trip a trivial task
   (``sandgrid.ping``) from as many threads: target >= 50% of it;
4. the floors under both targets, from the three hops every turn makes in
   turn (an authenticated HTTP request to the API, a Celery round trip, the
   channel's exec): their p50s one at a time, summed, against the channel;
   and their rates on this machine, combined (``1 / sum(1 / rate)``: they
   share its CPUs), against the trivial task's rate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cpu import CpuSplit, cpu_window, wait_quiet
from _grid import bench_grid
from _redis_count import Counted, counting
from _services import shared_redis_url
from _stats import pct

from sandgrid.client import Client
from sandgrid.models import ExecRequest
from sandgrid.wire import names
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from worker.ops.exec import exec_command
from worker.runtimes import runtime_for
from worker.sandboxes import SandboxManager

PORT = 8731
REDIS_URL = shared_redis_url(
    os.environ.get("SANDGRID_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
)
TOKEN = "tok-bench-" + "x" * 24
IMAGE = "sandgrid/sandbox-python:latest"
#: Issue 22's targets: warm turn p50 / the floor, throughput / the bound, commands per turn.
FLOOR_TARGET = 1.25
BOUND_TARGET = 0.85
COMMANDS_TARGET = 30


def warm_turns(client: Client, n: int) -> tuple[list[float], dict[str, list[float]], Counted]:
    """``n`` warm turns of one session: latencies and their breakdown; then ``n``
    more, untimed, over which the Redis commands of the grid's database are
    counted (every client: API, workers, Celery, heartbeats; ``_redis_count``)."""
    parts: dict[str, list[float]] = {
        k: [] for k in ("api_ms", "queue_ms", "worker_ms", "sandbox_ms")
    }
    total: list[float] = []
    with client.session(type="python") as s:
        for _ in range(20):
            s.exec(argv=["true"])
        for _ in range(n):
            t0 = time.perf_counter()
            r = s.exec(argv=["true"])
            total.append((time.perf_counter() - t0) * 1000)
            assert r.exit_code == 0, r
            for k in parts:
                parts[k].append(r.timings.get(k, 0.0))
        with counting(REDIS_URL) as calls:
            for _ in range(n):
                s.exec(argv=["true"])
    return total, parts, calls


def exec_run_baseline(n: int) -> list[float]:
    client = docker.from_env()
    c = client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        detach=True,
        network_mode="none",
        labels={"sandgrid.managed": "1", "sandgrid.worker": "bench"},
    )
    try:
        for _ in range(10):
            c.exec_run("true")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            c.exec_run("true")
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        c.remove(force=True)


def channel_baseline(n: int) -> list[float]:
    """``true`` through the backend's channel on a warm sandbox: no API, no queue."""
    backend = SandboxManager(runtime_for("runc"), node="bench-channel")
    sbx = backend.create("python")
    try:
        for _ in range(20):
            exec_command(backend, sbx, ExecRequest(argv=["true"]))
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            exec_command(backend, sbx, ExecRequest(argv=["true"]))
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        backend.destroy(sbx)


def celery_latency(nodes: list[str], n: int) -> list[float]:
    """Latencies (ms) of one trivial task's round trip at a time, on the grid's app and broker.

    Every turn is at least this (a Celery task there and its result back), so
    it is the floor under the turn / channel ratio that no turn-path work can cross.
    """
    app = make_celery(Settings(redis_url=REDIS_URL))
    queue = names.node_queue(nodes[0])
    app.send_task(names.TASK_PING, args=[0], queue=queue).get(timeout=30)  # connections up
    out = []
    for i in range(n):
        t = time.perf_counter()
        assert app.send_task(names.TASK_PING, args=[i], queue=queue).get(timeout=30) == i
        out.append((time.perf_counter() - t) * 1000)
    return out


def rate_of(op: Callable[[int], object], threads: int, seconds: float) -> float:
    """Calls per second of ``op(thread index)`` from ``threads`` threads for ``seconds``."""
    done = [0] * threads
    stop_at = time.perf_counter() + seconds

    def run(i: int) -> None:
        while time.perf_counter() < stop_at:
            op(i)
            done[i] += 1

    t0 = time.perf_counter()
    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return sum(done) / (time.perf_counter() - t0)


def celery_rate(nodes: list[str], threads: int, seconds: float) -> float:
    """Round trips per second of a trivial task on the grid's app and broker."""
    app = make_celery(Settings(redis_url=REDIS_URL))

    def ping(i: int) -> None:
        queue = names.node_queue(nodes[i % len(nodes)])
        assert app.send_task(names.TASK_PING, args=[i], queue=queue).get(timeout=30) == i

    return rate_of(ping, threads, seconds)


def http_floor(api: str, n: int, threads: int, seconds: float) -> tuple[list[float], float]:
    """An authenticated ``GET /v1/sessions/{id}`` (token check, one registry read):
    latencies one at a time, then the rate from ``threads`` threads."""
    with Client(api, TOKEN) as c, c.session(type="python") as s:
        url = f"{api}/v1/sessions/{s.id}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        clients = [httpx.Client(headers=headers) for _ in range(threads)]
        try:
            out = []
            for _ in range(n + 10):
                t0 = time.perf_counter()
                clients[0].get(url).raise_for_status()
                out.append((time.perf_counter() - t0) * 1000)
            rate = rate_of(lambda i: clients[i].get(url).raise_for_status(), threads, seconds)
        finally:
            for one in clients:
                one.close()
    return out[10:], rate


def exec_rate(sandboxes: int, seconds: float) -> float:
    """Execs of ``true`` per second through the channel, one thread per warm sandbox."""
    backend = SandboxManager(runtime_for("runc"), node="bench-channel")
    boxes = [backend.create("python") for _ in range(sandboxes)]
    try:
        return rate_of(
            lambda i: exec_command(backend, boxes[i], ExecRequest(argv=["true"])),
            sandboxes,
            seconds,
        )
    finally:
        for sbx in boxes:
            backend.destroy(sbx)


def throughput(api: str, sessions: int, seconds: float) -> tuple[int, float, CpuSplit, float]:
    """Turns of ``true`` from ``sessions`` clients at once for ``seconds``: how many, their
    rate, and where the machine's CPU went meanwhile (``_cpu``).

    Timed once the sessions are made and the machine is quiet again: each new session
    took a warm sandbox, and the nodes' pools refill at once, ~0.3 s of CPU per
    container. Those starts are the sessions' cost, not their turns'; in the window
    they took a fifth to a quarter of the machine (Docker's CPU per turn 2.9-4.5 ms
    against 1.3 ms after them)."""
    done = [0] * sessions
    errors: list[BaseException] = []
    ready = threading.Barrier(sessions + 1)
    start = threading.Barrier(sessions + 1)
    stop_at = [0.0]

    def run(i: int) -> None:
        try:
            with Client(api, TOKEN) as c, c.session(type="python") as s:
                s.exec(argv=["true"])
                ready.wait()
                start.wait()
                while time.perf_counter() < stop_at[0]:
                    s.exec(argv=["true"])
                    done[i] += 1
        except BaseException as exc:  # reported below
            errors.append(exc)
            ready.abort()
            start.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    stop_at[0] = time.perf_counter() + 3600
    ready.wait()
    settled_s = wait_quiet()
    start.wait()
    t0 = time.perf_counter()
    stop_at[0] = t0 + seconds
    with cpu_window() as cpu:
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return sum(done), sum(done) / (time.perf_counter() - t0), cpu, settled_s


@dataclass
class Figures:
    """What one run measured: latencies in ms, rates per second."""

    total: list[float]
    parts: dict[str, list[float]]
    calls: Counted
    base: list[float]
    channel: list[float]
    floor: list[float]
    count: int
    rate: float
    cpu: CpuSplit
    settled_s: float
    ping_rate: float
    http: list[float]
    http_rate: float
    channel_rate: float


def measure(args: argparse.Namespace) -> Figures:
    """Every figure of the run, on its own grid (two nodes)."""
    nodes = ["bench-w1", "bench-w2"]
    n = max(200, args.turns)
    with bench_grid(
        port=args.port, redis_url=REDIS_URL, token=TOKEN, nodes=nodes, concurrency=8
    ) as grid:
        with Client(grid.api_url, TOKEN) as client:
            total, parts, calls = warm_turns(client, args.turns)
        base, channel, floor = exec_run_baseline(n), channel_baseline(n), celery_latency(nodes, n)
        count, rate, cpu, settled_s = throughput(grid.api_url, args.sessions, args.seconds)
        ping_rate = celery_rate(nodes, args.sessions, args.seconds)
        http, http_rate = http_floor(grid.api_url, n, args.sessions, args.seconds)
        channel_rate = exec_rate(4, args.seconds)
    return Figures(
        total, parts, calls, base, channel, floor, count, rate, cpu, settled_s,
        ping_rate, http, http_rate, channel_rate,
    )  # fmt: skip


def report_latency(f: Figures) -> float:
    """The warm turn against its baselines; the redis commands per turn."""
    p50, p99 = statistics.median(f.total), pct(f.total, 99)
    b50, b99 = statistics.median(f.base), pct(f.base, 99)
    print(
        f"end-to-end warm turn of `true` ({len(f.total)} turns): p50 {p50:.2f} ms  p99 {p99:.2f} ms"
    )
    for k, xs in f.parts.items():
        print(f"  {k:<11} p50 {statistics.median(xs):7.2f} ms  p99 {pct(xs, 99):7.2f} ms")
    round_trips, per_turn = f.calls.per(len(f.total))
    print(
        f"  redis commands per turn (every client): {per_turn:.1f}  (target <= 30; "
        f"{per_turn / COMMANDS_TARGET:.2f}x the target; round trips {round_trips:.1f}; "
        f"{f.calls.top(len(f.total), 12)})"
    )
    print(f"  by kind, per turn: {f.calls.top(len(f.total), 0)}")
    print(
        f"docker exec_run('true') on a warm container ({len(f.base)} runs): "
        f"p50 {b50:.2f} ms  p99 {b99:.2f} ms"
    )
    print(
        f"ratio exec_run / grid turn: p50 {b50 / p50:.2f}x  p99 {b99 / p99:.2f}x"
        "  (target: p50 <= 20 ms, ~3x)"
    )
    c50 = statistics.median(f.channel)
    print(
        f"backend channel alone, `true` on a warm sandbox ({len(f.channel)} runs): "
        f"p50 {c50:.2f} ms  p99 {pct(f.channel, 99):.2f} ms"
    )
    print(f"ratio grid turn / channel: p50 {p50 / c50:.2f}x  (target <= 2.5x)")
    f50, h50 = statistics.median(f.floor), statistics.median(f.http)
    print(
        f"celery round trip of a trivial task alone, one at a time ({len(f.floor)} runs): "
        f"p50 {f50:.2f} ms = {f50 / c50:.2f}x the channel"
    )
    print(f"authenticated GET of the session, one at a time ({len(f.http)} runs): p50 {h50:.2f} ms")
    print(
        f"floor of any turn (that GET + that round trip + the channel): {h50 + f50 + c50:.2f} ms"
        f" = {(h50 + f50 + c50) / c50:.2f}x the channel (target <= 2.5x)"
    )
    return per_turn


def report_throughput(f: Figures, args: argparse.Namespace) -> float:
    """The turns per second against the trivial task's rate and the bound; the bound."""
    print(
        f"throughput: {f.count} turns in {args.seconds:.0f} s over {args.sessions} sessions "
        f"and 2 workers: {f.rate:.1f} turns/s (timed once the pools had refilled, "
        f"{f.settled_s:.1f} s after the sessions began)"
    )
    print(f"  per turn, the machine's CPU: {f.cpu.per(f.count)}")
    print(
        f"celery round trip of a trivial task, {args.sessions} threads, same app and broker: "
        f"{f.ping_rate:.1f} tasks/s"
    )
    print(f"ratio turns / trivial tasks: {f.rate / f.ping_rate:.0%}  (target >= 50%)")
    bound = 1 / (1 / f.http_rate + 1 / f.ping_rate + 1 / f.channel_rate)
    print(
        f"same machine, {args.sessions} threads: {f.http_rate:.1f} GETs/s; channel, 4 sandboxes: "
        f"{f.channel_rate:.1f} execs/s; a turn needs all three, so at most "
        f"{bound:.1f} turns/s = {bound / f.ping_rate:.0%} of the trivial rate"
    )
    return bound


def report_targets(f: Figures, per_turn: float, bound: float) -> None:
    """The three figures of issue 22 against their targets."""
    p50 = statistics.median(f.total)
    floor_ms = statistics.median(f.http) + statistics.median(f.floor) + statistics.median(f.channel)
    print("against the floor (issue 22, same run):")
    print(
        f"  warm turn p50 / the floor: {p50:.2f} / {floor_ms:.2f} ms = "
        f"{p50 / floor_ms:.2f}x  (target <= {FLOOR_TARGET:.2f}x)"
    )
    print(
        f"  throughput / the bound: {f.rate:.1f} / {bound:.1f} turns/s = "
        f"{f.rate / bound:.0%}  (target >= {BOUND_TARGET:.0%})"
    )
    print(
        f"  redis commands per turn: {per_turn:.1f} / {COMMANDS_TARGET} = "
        f"{per_turn / COMMANDS_TARGET:.2f}x  (target <= 1.00x)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--port", type=int, default=PORT, help="the bench grid's API port")
    args = ap.parse_args()
    figures = measure(args)
    per_turn = report_latency(figures)
    bound = report_throughput(figures, args)
    report_targets(figures, per_turn, bound)


if __name__ == "__main__":
    main()
