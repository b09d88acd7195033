"""Scale-out, measured (issue 22.4): the cost of a turn and of a node as nodes are added.

    python3 bench/bench_scale.py [--nodes 2,4,8] [--sessions 4] [--turns 30] [--idle 6]

For each node count it starts its own grid (one API on 127.0.0.1:8741, N worker
nodes ``sc-w1..N`` with their own names, one turn at a time each and one warm
sandbox; Redis db 12 or ``SANDGRID_BENCH_REDIS_URL``), then, with the same load
for every N (``--sessions`` sessions, each running ``--turns`` turns of ``true``
one after another):

1. an idle window (the sessions live, no turn) of ``--idle`` seconds: every
   Redis command of the grid's database (``MONITOR``, ``_redis_count``) and
   the API's CPU: heartbeat, lease and Celery polling traffic per node per
   second, and the API's idle CPU;
2. the turns: Redis commands per turn (the window's count less the idle rate
   over its length), the API's CPU per turn (its process group's utime+stime,
   less its idle rate), routing latency (the API's own time of a turn,
   ``timings.api_ms``: admission, routing, the registry, not the wait) and the
   turn's p50, and the throughput.

None of these may grow with N for a fixed load: each line prints the figure
at 2/4/8 nodes and the ratio of the largest N to the smallest, target <= 1.25x
(noise on a 2-core machine shared with the nodes; the per-node traffic's
target is the same). Then one more grid at the middle N with two API
processes behind a round-robin TCP balancer (``_balancer``): every turn must
succeed through it, and its figures print beside one API's.
docs/scale.md turns these figures into the capacity of one Redis and one API.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _balancer import RoundRobin
from _redis_count import counting
from _services import grid_env, shared_redis_url
from _stats import pct

from sandgrid.client import Client
from sandgrid.localgrid import LocalGrid

PORT = 8741
LB_PORT = 8743
TOKEN = "tok-bench-scale-" + "s" * 24
REDIS_URL = shared_redis_url(
    os.environ.get("SANDGRID_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
)
TARGET_RATIO = 1.25
SETTLE_S = 5.0
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Figures:
    """One grid's measured figures."""

    nodes: int
    apis: int
    commands_per_turn: float
    round_trips_per_turn: float
    api_cpu_ms_per_turn: float
    idle_per_node_s: float
    idle_top: str
    node_idle_cpu_pct: float
    connections: int
    session_bytes: float
    routing_p50_ms: float
    turn_p50_ms: float
    turns_per_s: float


def group_cpu_s(pgid: int) -> float:
    """utime + stime of every process in the process group ``pgid`` (s)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 of stat: pgrp
                total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


@contextlib.contextmanager
def grid(
    nodes: int, apis: int, tmp: Path
) -> Iterator[tuple[list[int], list[int], str, RoundRobin | None]]:
    """The grid: ``apis`` API processes (behind the balancer when 2), ``nodes``
    nodes; yields the APIs' and the nodes' process groups, the URL clients use,
    the balancer."""
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    env = {**grid_env(REDIS_URL), "SANDGRID_WORKER__POOL_SIZE": "1"}
    local = LocalGrid(tmp, port=PORT, redis_url=REDIS_URL, tenants={"bench": TOKEN}, env=env)
    names = [f"sc-w{i + 1}" for i in range(nodes)]
    balancer = None
    try:
        local.start(names, concurrency=1)
        if apis == 2:
            local.spawn("api2", "serve", "--host", "127.0.0.1", "--port", str(PORT + 1))
            balancer = RoundRobin(LB_PORT, [PORT, PORT + 1]).start()
        pgids = [p.pid for name, p in local.procs.items() if name.startswith("api")]
        nodes_pg = [local.procs[n].pid for n in names]
        for port in [PORT, PORT + 1][:apis]:
            local.wait(lambda port=port: _up(f"http://127.0.0.1:{port}"), f"the API on {port}")
        url = f"http://127.0.0.1:{LB_PORT}" if balancer else local.api_url
        time.sleep(SETTLE_S)  # the nodes' start-up (pools, catalog) out of the windows
        yield pgids, nodes_pg, url, balancer
    finally:
        if balancer:
            balancer.stop()
        local.stop()
        r.flushdb()


def _db() -> tuple[redis.Redis[str], int]:
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    return r, int(r.connection_pool.connection_kwargs.get("db", 0))


def _db_bytes() -> int:
    """What the keys of the bench's database take in Redis (``MEMORY USAGE``)."""
    r, _ = _db()
    return sum(int(r.memory_usage(k) or 0) for k in r.scan_iter(count=1000))


def _db_clients() -> int:
    """Connections open on the bench's database (``CLIENT LIST``'s ``db``)."""
    r, db = _db()
    return sum(1 for c in r.client_list() if int(c.get("db", -1)) == db) - 1  # less ours


def _up(url: str) -> bool:
    import httpx

    return httpx.get(f"{url}/v1/health", timeout=2).is_success


def measure(nodes: int, apis: int, sessions: int, turns: int, idle_s: float) -> Figures:
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
        grid(nodes, apis, Path(tmp)) as (pgids, nodes_pg, url, balancer),
        Client(url, TOKEN) as client,
    ):
        before = _db_bytes()
        live = [client.session() for _ in range(sessions)]
        for s in live:  # each on its node, warm
            for _ in range(2):
                s.exec(argv=["true"])
        session_bytes = (_db_bytes() - before) / sessions
        clients = _db_clients()
        idle = _idle(pgids, nodes_pg, idle_s)
        busy = _busy(live, turns, pgids)
        for s in live:
            s.close()
        if balancer is not None:
            print(f"balancer: connections per API port {balancer.connections}", flush=True)
    n, wall = sessions * turns, busy.wall
    rt, cmds = busy.counts.per(1)
    return Figures(
        nodes=nodes,
        apis=apis,
        commands_per_turn=(cmds - idle.rate * wall) / n,
        round_trips_per_turn=(rt - idle.rt_rate * wall) / n,
        api_cpu_ms_per_turn=max(0.0, busy.cpu - idle.cpu_rate * wall) / n * 1000,
        idle_per_node_s=idle.rate / nodes,
        idle_top=idle.counts.top(int(idle_s * nodes), 6),
        node_idle_cpu_pct=idle.node_cpu_rate / nodes * 100,
        connections=clients,
        session_bytes=session_bytes,
        routing_p50_ms=pct(busy.routing, 50),
        turn_p50_ms=pct(busy.latency, 50),
        turns_per_s=n / wall,
    )


@dataclass
class _Idle:
    """The idle window: the grid's CPU, the nodes' CPU and Redis's commands, per second."""

    cpu_rate: float
    node_cpu_rate: float
    rate: float
    rt_rate: float
    counts: Any


def _idle(pgids: list[int], nodes_pg: list[int], idle_s: float) -> _Idle:
    cpu0 = sum(group_cpu_s(p) for p in pgids)
    node0 = sum(group_cpu_s(p) for p in nodes_pg)
    with counting(REDIS_URL) as counts:
        time.sleep(idle_s)
    return _Idle(
        cpu_rate=(sum(group_cpu_s(p) for p in pgids) - cpu0) / idle_s,
        node_cpu_rate=(sum(group_cpu_s(p) for p in nodes_pg) - node0) / idle_s,
        rate=sum(counts.commands.values()) / idle_s,
        rt_rate=counts.per(1)[0] / idle_s,
        counts=counts,
    )


@dataclass
class _Busy:
    """The busy window: each turn's latency and routing, its wall time, CPU and commands."""

    latency: list[float]
    routing: list[float]
    wall: float
    cpu: float
    counts: Any


def _busy(live: list[Any], turns: int, pgids: list[int]) -> _Busy:
    """``turns`` turns of ``true`` on every session at once, a thread each."""
    latency: list[float] = []
    routing: list[float] = []
    lock = threading.Lock()

    def run(session: Any) -> None:
        for _ in range(turns):
            t0 = time.perf_counter()
            result = session.exec(argv=["true"])
            took = (time.perf_counter() - t0) * 1000
            assert result.exit_code == 0, result
            with lock:
                latency.append(took)
                routing.append(float(result.timings.get("api_ms", 0.0)))

    cpu0 = sum(group_cpu_s(p) for p in pgids)
    with counting(REDIS_URL) as counts:
        t0 = time.perf_counter()
        threads = [threading.Thread(target=run, args=(s,)) for s in live]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    cpu = sum(group_cpu_s(p) for p in pgids) - cpu0
    return _Busy(latency, routing, wall, cpu, counts)


def report(rows: list[Figures]) -> None:
    """Each figure at every N, and the largest N's over the smallest's."""
    first, last = rows[0], rows[-1]
    lines = [
        ("redis commands per turn (every client)", "commands_per_turn", "{:.1f}"),
        ("redis round trips per turn", "round_trips_per_turn", "{:.1f}"),
        ("API CPU per turn", "api_cpu_ms_per_turn", "{:.2f} ms"),
        ("idle redis commands per node per second", "idle_per_node_s", "{:.1f}"),
        ("routing latency p50 (api_ms)", "routing_p50_ms", "{:.2f} ms"),
        ("idle CPU per node", "node_idle_cpu_pct", "{:.1f}%"),
    ]
    print(f"\nnodes: {', '.join(str(f.nodes) for f in rows)} (same load each)")
    for label, attr, fmt in lines:
        values = [getattr(f, attr) for f in rows]
        shown = " / ".join(fmt.format(v) for v in values)
        ratio = values[-1] / values[0] if values[0] else float("nan")
        verdict = "ok" if ratio <= TARGET_RATIO else "OVER"
        print(
            f"{label}: {shown}  ({last.nodes}/{first.nodes} nodes: {ratio:.2f}x, "
            f"target <= {TARGET_RATIO}x) {verdict}"
        )
    print(
        "redis connections (grid): "
        + " / ".join(f"{f.connections} ({f.connections / f.nodes:.1f} per node)" for f in rows)
    )
    print(f"redis memory per live session: {last.session_bytes:.0f} bytes")
    print("turn p50: " + " / ".join(f"{f.turn_p50_ms:.1f} ms" for f in rows) + " (for reference)")
    print("throughput: " + " / ".join(f"{f.turns_per_s:.1f} turns/s" for f in rows))
    for f in rows:
        print(f"idle traffic per node per second at {f.nodes} nodes, commonest: {f.idle_top}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--nodes", default="2,4,8")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=30, help="turns per session")
    ap.add_argument("--idle", type=float, default=6.0, help="idle window (s)")
    ap.add_argument("--no-balancer", action="store_true", help="skip the 2-API run")
    args = ap.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    rows = []
    for n in counts:
        rows.append(measure(n, 1, args.sessions, args.turns, args.idle))
        f = rows[-1]
        print(
            f"{n} nodes: {f.commands_per_turn:.1f} redis commands/turn, "
            f"{f.api_cpu_ms_per_turn:.2f} ms API CPU/turn, {f.idle_per_node_s:.1f} idle "
            f"commands/node/s, routing p50 {f.routing_p50_ms:.2f} ms, "
            f"turn p50 {f.turn_p50_ms:.1f} ms, {f.turns_per_s:.1f} turns/s",
            flush=True,
        )
    report(rows)
    if args.no_balancer:
        return
    mid = counts[len(counts) // 2]
    one = next(f for f in rows if f.nodes == mid)
    two = measure(mid, 2, args.sessions, args.turns, args.idle)
    print(
        f"\n2 APIs behind a round-robin balancer, {mid} nodes: every turn ok; "
        f"{two.turns_per_s:.1f} turns/s vs {one.turns_per_s:.1f} with one API "
        f"({two.turns_per_s / one.turns_per_s:.2f}x); API CPU per turn (both) "
        f"{two.api_cpu_ms_per_turn:.2f} ms vs {one.api_cpu_ms_per_turn:.2f} ms; "
        f"redis commands per turn {two.commands_per_turn:.1f} vs {one.commands_per_turn:.1f}; "
        f"routing p50 {two.routing_p50_ms:.2f} ms vs {one.routing_p50_ms:.2f} ms"
    )


if __name__ == "__main__":
    main()
