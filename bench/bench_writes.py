"""Turns that change the workspace, against turns of ``true``, in one run (issue 22.2).

    python3 bench/bench_writes.py [--turns 40] [--sessions 16] [--each 20] [--type python]

Starts its own grid (API on 127.0.0.1:8734, two worker nodes, Redis db 13 or
``--redis-url``, snapshots in the machine's MinIO: the after-turn snapshot is
the cost measured), and prints, each beside its target:

1. one session, ``--turns`` turns each of ``true``, of appending a line to a
   file and of writing 1 MB, taken in turn (one of each, then again), so that
   the machine's load drifts alike for all three: p50 of the turn and of its
   snapshot (``timings.snapshot_ms``); an append / ``true`` (target <= 1.3x);
   then appends in a row, in blocks of ``BLOCK`` taken in turn with blocks of
   ``true``: an append after another one finds the work the one before left
   after its answer (a fold-out of the pointer's chain once it passes its
   budget, ``Catalog.ensure_folded``), which turns taken in turn leave to the
   kinds between;
2. the 1 MB turn's snapshot rate against a plain PUT of the same number of
   bytes to the same MinIO, one PUT after each 1 MB turn (once the turn's
   node has stored what it stores after the answer), so that both see the
   same stretch of the machine's load (target >= 50% of the PUT's rate);
3. ``--sessions`` sessions at once, ``--each`` turns each, appending, then the
   same sessions running ``true``: turns/s, p50, p99 (targets: p99 <= 4x p50,
   the appends' rate >= 50% of the ``true`` turns').
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cpu import wait_quiet
from _grid import bench_grid
from _services import minio_settings
from _stats import pct
from minio import Minio

from sandgrid.client import Client, Session

PORT = 8734
REDIS_URL = "redis://127.0.0.1:6379/13"
TOKEN = "tok-bench-" + "w" * 24
MB = 1_000_000
#: The pause before the PUT measured beside a 1 MB turn: what the turn's node does
#: after the answer (the pointer's manifest stored on its own) must not slow the PUT.
SETTLE_S = 0.05
WRITES = {
    "true": "true",
    "append a line": "echo line >> log.txt",
    "write 1 MB": f"head -c {MB} /dev/urandom > big.bin",
}
#: Turns of one kind in a row, in ``in_a_row``.
BLOCK = 10


def one_session(
    client: Client, turns: int, sbx_type: str, put: Callable[[], float]
) -> tuple[dict[str, tuple[list[float], list[float]]], list[float]]:
    """Turn and snapshot times (ms) of each kind of turn, on one warm session, the
    kinds taken in turn (the first 5 rounds are warm-up); and the time of a plain
    PUT (``put``) made right after each 1 MB turn."""
    out: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in WRITES}
    puts: list[float] = []
    with client.session(type=sbx_type) as s:
        s.exec(shell="head -c 1000000 /dev/urandom > seed.bin")  # a workspace with a file
        for i in range(turns + 5):
            for name, command in WRITES.items():
                t0 = time.perf_counter()
                r = s.exec(shell=command)
                if i >= 5:
                    out[name][0].append((time.perf_counter() - t0) * 1000)
                    out[name][1].append(float(r.timings.get("snapshot_ms", 0.0)))
                assert r.exit_code == 0, r
                if name == "write 1 MB":
                    time.sleep(SETTLE_S)  # the turn's work after its answer (a fold-out) done
                    ms = put()
                    if i >= 5:
                        puts.append(ms)
    return out, puts


def in_a_row(client: Client, turns: int, sbx_type: str) -> tuple[list[float], list[float]]:
    """Times (ms) of ``turns`` appends one after another and ``turns`` turns of
    ``true``, on one warm session, in blocks of ``BLOCK`` taken in turn (the first
    block of each is warm-up)."""
    appends: list[float] = []
    trues: list[float] = []
    with client.session(type=sbx_type) as s:
        s.exec(shell="head -c 1000000 /dev/urandom > seed.bin")
        for block in range(-(-turns // BLOCK) + 1):
            for command, out in ((WRITES["append a line"], appends), ("true", trues)):
                for _ in range(BLOCK):
                    t0 = time.perf_counter()
                    r = s.exec(shell=command)
                    if block > 0:
                        out.append((time.perf_counter() - t0) * 1000)
                    assert r.exit_code == 0, r
    return appends, trues


@contextlib.contextmanager
def plain_put() -> Iterator[Callable[[], float]]:
    """A plain PUT of 1 MB of fresh bytes to the same MinIO, with the SDK's defaults
    (a bucket of its own, removed after): each call, its milliseconds."""
    s = minio_settings()
    client = Minio(s.endpoint, s.access_key, s.secret_key, secure=s.secure)
    bucket = f"sgbench-put-{uuid.uuid4().hex[:8]}"
    client.make_bucket(bucket)
    count = itertools.count()

    def put() -> float:
        body = uuid.uuid4().bytes * (MB // 16)  # fresh bytes each time, as a turn's
        t0 = time.perf_counter()
        client.put_object(bucket, f"o{next(count)}", io.BytesIO(body), len(body))
        return (time.perf_counter() - t0) * 1000

    try:
        yield put
    finally:
        for obj in client.list_objects(bucket):
            client.remove_object(bucket, str(obj.object_name))
        client.remove_bucket(bucket)


def many_sessions(
    api: str, sessions: int, each: int, command: str, sbx_type: str
) -> tuple[list[float], float]:
    """``sessions`` sessions running ``each`` turns of ``command`` at once: the
    turns' latencies and the rate (turns/s) from the first to the last."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    ready = threading.Barrier(sessions + 1)

    def run(s: Session) -> None:
        try:
            ready.wait()
            for _ in range(each):
                t0 = time.perf_counter()
                r = s.exec(shell=command)
                ms = (time.perf_counter() - t0) * 1000
                assert r.exit_code == 0, r
                with lock:
                    latencies.append(ms)
        except BaseException as exc:  # reported below
            errors.append(exc)

    with Client(api, TOKEN) as client:
        opened = [client.session(type=sbx_type) for _ in range(sessions)]
        try:
            for s in opened:
                s.exec(shell="true")  # live before the burst
            wait_quiet()  # the nodes' pools refilled after the new sessions (bench_grid)
            threads = [threading.Thread(target=run, args=(s,)) for s in opened]
            for t in threads:
                t.start()
            ready.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - t0
        finally:
            for s in opened:
                s.close()
    if errors:
        raise errors[0]
    return latencies, len(latencies) / elapsed


def verdict(ok: bool) -> str:
    return "[target met]" if ok else "[target MISSED]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--each", type=int, default=20)
    ap.add_argument("--redis-url", default=REDIS_URL)
    ap.add_argument("--type", default="python", help="python (runc) or python-gvisor (runsc)")
    args = ap.parse_args()
    with bench_grid(
        port=PORT,
        redis_url=args.redis_url,
        token=TOKEN,
        nodes=["bw-w1", "bw-w2"],
        concurrency=8,
        store="minio",
        types=args.type,
    ) as grid:
        with Client(grid.api_url, TOKEN) as client, plain_put() as put:
            single, puts = one_session(client, args.turns, args.type, put)
            row_appends, row_trues = in_a_row(client, args.turns, args.type)
        appends, append_rate = many_sessions(
            grid.api_url, args.sessions, args.each, WRITES["append a line"], args.type
        )
        trues, true_rate = many_sessions(grid.api_url, args.sessions, args.each, "true", args.type)
    print(f"type {args.type}; one session, {args.turns} turns of each (ms)")
    print(f"  {'turn':<16}{'p50':>8}{'p99':>8}{'snapshot p50':>14}")
    for name, (total, snap) in single.items():
        p50, s50 = statistics.median(total), statistics.median(snap)
        print(f"  {name:<16}{p50:8.1f}{pct(total, 99):8.1f}{s50:14.1f}")
    base = statistics.median(single["true"][0])
    ratio = statistics.median(single["append a line"][0]) / base
    print(f"  append / true, p50: {ratio:.2f}x (target <= 1.3x) {verdict(ratio <= 1.3)}")
    row_a, row_t = statistics.median(row_appends), statistics.median(row_trues)
    print(
        f"  appends in a row (blocks of {BLOCK}, {len(row_appends)} turns): p50 {row_a:.1f} ms;"
        f" true in blocks beside them {row_t:.1f} ms; append / true {row_a / row_t:.2f}x"
        f" (target <= 1.3x) {verdict(row_a / row_t <= 1.3)}"
    )
    snap_ms = statistics.median(single["write 1 MB"][1])
    put_ms = statistics.median(puts)
    share = put_ms / snap_ms
    print(
        f"1 MB: snapshot {snap_ms:.1f} ms = {MB / snap_ms / 1000:.1f} MB/s; plain PUT "
        f"{put_ms:.1f} ms = {MB / put_ms / 1000:.1f} MB/s; snapshot rate / PUT rate "
        f"{share:.0%} (target >= 50%) {verdict(share >= 0.5)}"
    )
    print(f"{args.sessions} sessions at once, {args.each} turns each")
    for name, lat, rate in (("append", appends, append_rate), ("true", trues, true_rate)):
        p50, p99 = statistics.median(lat), pct(lat, 99)
        print(
            f"  {name:<7} {rate:6.1f} turns/s  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms"
            f"  p99/p50 {p99 / p50:.1f}x (target <= 4x) {verdict(p99 <= 4 * p50)}"
        )
    share = append_rate / true_rate
    print(f"  append rate / true rate: {share:.0%} (target >= 50%) {verdict(share >= 0.5)}")


if __name__ == "__main__":
    main()
