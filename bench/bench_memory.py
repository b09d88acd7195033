#!/usr/bin/env python3
"""Memory snapshots (issue 24) vs rebuilding the state, in one run, on runsc and MinIO.

    python3 bench/bench_memory.py             # ~2-4 min on 2 cores
    python3 bench/bench_memory.py --mb 50

A grid of the API and two nodes (``bm-w1``, ``bm-w2``) on the real Docker with
gVisor, Redis and the MinIO of ``make services`` (a bucket of its own, dropped
after). Session A builds ``--mb`` MB of numpy arrays in its Jupyter kernel (half
random, half regular), then:

- pause with memory on the node that ran it: checkpoint time, stored bytes and
  the compression ratio, the pause's total latency; the pause asks the other
  node to stage the image ahead (``--no-stage``: the nodes stage nothing);
- the pausing node stops; resume on the other: the time to the first answered
  ``run_code`` (its variables there, ``kernel_restarted`` false), from the
  staged image or (``--no-stage``) fetched from the store;
- against the cold path for session B, built the same way and paused without
  memory: its next turn is the setup code again, which restores the workspace into
  a fresh sandbox and starts a new kernel first (one turn, as a user would send
  it); the target is resume >= 3x faster;
- a second pause with memory of session A after the resume: the bytes it
  uploaded (chunks the store lacked: images are chunked and shared, 24.4)
  beside the first pause's;
- the stopped node starts again; fork x8 with memory of A (running again): the time
  to 8 sessions that each answered a ``run_code`` on the state, against 8 cold
  sessions that each run the setup (target >= 3x).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cpu import cpu_window
from _services import grid_env, minio_settings, shared_redis_url

from sandgrid.client import Client, Session
from sandgrid.localgrid import LocalGrid
from sandgrid.models import Quotas

TOKEN = "tok-bench-memory-" + "m" * 24
NODES = ["bm-w1", "bm-w2"]
TYPES = "python-gvisor"
SETUP = """
import numpy as np
rng = np.random.default_rng(0)
n = {mb} * (1 << 20) // 16
arrays = [rng.random(n), np.arange(n, dtype=np.float64)]
total = float(sum(a.sum() for a in arrays))
"""
CHECK = "round(float(sum(a.sum() for a in arrays)) - total, 6), len(arrays[0])"


def _grid(tmp: Path, port: int, redis_url: str, bucket: str, stage: bool) -> LocalGrid:
    url = shared_redis_url(redis_url)
    minio = minio_settings()
    env = {
        **grid_env(url),
        "SANDGRID_WORKER__POOL_SIZE": "1",
        "SANDGRID_WORKER__METRICS_PORT": "0",
        "SANDGRID_WORKER__SNAPSHOT_STORE": "minio",
        "SANDGRID_MINIO__ENDPOINT": minio.endpoint,
        "SANDGRID_MINIO__ACCESS_KEY": minio.access_key,
        "SANDGRID_MINIO__SECRET_KEY": minio.secret_key,
        "SANDGRID_MINIO__BUCKET": bucket,
        "SANDGRID_LEASE_TTL_S": "6",
        "SANDGRID_HEARTBEAT_S": "0.5",
        **({} if stage else {"SANDGRID_WORKER__MEMORY__STAGE_MB": "0"}),
    }
    return LocalGrid(tmp, port=port, redis_url=url, tenants={"bench": TOKEN}, env=env)


def _timed(fn: object) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()  # type: ignore[operator]
    return time.perf_counter() - t0, out


def _build(client: Client, mb: int) -> tuple[Session, float]:
    s = client.session(type=TYPES, quotas=Quotas(memory_mb=4 * mb + 512, timeout_s=300))
    took, res = _timed(lambda: s.run_code(SETUP.format(mb=mb), timeout_s=300))
    assert res.error is None, res  # type: ignore[attr-defined]
    return s, took


def run(args: argparse.Namespace) -> None:
    bucket = f"sandgrid-bench-memory-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        grid = _grid(Path(tmp), args.port, args.redis_url, bucket, not args.no_stage)
        try:
            grid.start(NODES, types=TYPES, concurrency=4)
            grid.wait(lambda: set(NODES) <= grid.workers_seen(), "both nodes")
            with Client(grid.api_url, token=TOKEN, timeout=600) as client:
                _measure(grid, client, args.mb, args.settle)
        finally:
            grid.stop()
            if args.logs is not None:  # the nodes' logs: where each restore's time went
                args.logs.mkdir(parents=True, exist_ok=True)
                for log in Path(tmp).glob("*.log"):
                    shutil.copy(log, args.logs / log.name)
            with contextlib.suppress(Exception):
                from sandgrid.wire.objects.minio import MinioObjects

                m = minio_settings()
                MinioObjects(m.endpoint, m.access_key, m.secret_key, bucket).drop_bucket()


def _measure(grid: LocalGrid, client: Client, mb: int, args_settle: float) -> None:
    a, setup_s = _build(client, mb)
    b, _ = _build(client, mb)
    paused_on = str(a.refresh().owner)
    pause_s, done = _timed(lambda: a.pause(memory=True))
    assert done.memory, done  # type: ignore[attr-defined]
    assert not b.pause().memory  # type: ignore[attr-defined]
    grid.kill(paused_on, signal.SIGTERM)
    time.sleep(args_settle)  # the warm pools refill (and the image is staged): neither waits
    staged_on = a.refresh().memory_staged_on

    resume_s, res = _timed(lambda: a.run_code(CHECK))
    assert res.kernel_restarted is False and res.node != paused_on, res  # type: ignore[attr-defined]
    # What a user without memory does: the setup again as the session's next turn, which
    # restores the workspace into a fresh sandbox and starts a new kernel first.
    cold_s, cold = _timed(lambda: b.run_code(SETUP.format(mb=mb), timeout_s=300))
    assert cold.error is None and cold.kernel_restarted is True, cold  # type: ignore[attr-defined]
    time.sleep(3.0)  # a restore loads its pages in the background: let it finish first
    again_s, again = _timed(lambda: a.pause(memory=True))
    assert again.memory, again  # type: ignore[attr-defined]

    raw = done.memory_raw_bytes or 0  # type: ignore[attr-defined]
    stored = done.memory_bytes or 0  # type: ignore[attr-defined]
    ms = done.memory_ms  # type: ignore[attr-defined]
    print(f"state: {mb} MB of numpy arrays (setup took {setup_s:.2f} s)")
    print(
        f"pause with memory: total {pause_s * 1000:.0f} ms, checkpoint "
        f"{ms.get('checkpoint_ms', 0):.0f} ms, pack+upload {ms.get('store_ms', 0):.0f} ms"
    )
    print(
        f"  image {raw / 1e6:.1f} MB raw -> {stored / 1e6:.1f} MB stored "
        f"(compression {raw / max(stored, 1):.2f}x)"
    )
    print(f"resume on the other node, first answered turn: {resume_s * 1000:.0f} ms")
    print(f"  the image staged ahead on: {staged_on or 'no node (fetched at the resume)'}")
    if staged_on:
        print(f"  the stage (off the pause's and the resume's path): {_staged_ms(grid, a.id)}")
    print(f"cold: one turn of workspace restore + new kernel + setup again {cold_s * 1000:.0f} ms")
    print(f"  the resume's restore: {_restores(grid, {a.id})}")
    print(f"resume vs rebuild: {cold_s / resume_s:.2f}x faster (target >= 3x)")
    new = again.memory_new_bytes or 0  # type: ignore[attr-defined]
    print(
        f"second pause with memory: {new / 1e6:.1f} MB uploaded of a "
        f"{again.memory_bytes / 1e6:.1f} MB image, {again_s * 1000:.0f} ms "  # type: ignore[attr-defined]
        f"(first: {(done.memory_new_bytes or 0) / 1e6:.1f} MB uploaded; "  # type: ignore[attr-defined]
        f"{new / max(done.memory_new_bytes or 1, 1):.2f} of it)"  # type: ignore[attr-defined]
    )
    b.close()
    _fork(grid, client, a, mb, paused_on)


_RESTORED = re.compile(
    r"session (\S+): memory image fetched in (\d+) ms(?: \((\d+) chunks from the store)?"
    r".*?restored in (\d+) ms"
)


def _restores(grid: LocalGrid, sessions: set[str]) -> str:
    """Where the restores of ``sessions`` spent their time, per node (the nodes' logs)."""
    rows = []
    for node in NODES:
        path = grid.workdir / f"{node}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        found = [m for m in _RESTORED.finditer(text) if m.group(1) in sessions]
        if not found:
            continue
        fetch = sorted(int(m.group(2)) for m in found)
        restore = sorted(int(m.group(4)) for m in found)
        chunks = [int(m.group(3)) for m in found if m.group(3) is not None]
        store = f", chunks from the store {sum(chunks)}" if chunks else ""
        rows.append(
            f"{node}: {len(found)} restores, fetch {fetch[len(fetch) // 2]} ms median "
            f"(max {fetch[-1]}), restore {restore[len(restore) // 2]} ms median "
            f"(max {restore[-1]}){store}"
        )
    return "; ".join(rows) or "no restore in the nodes' logs"


def _staged_ms(grid: LocalGrid, session: str) -> str:
    """How long the staging node took to stage the session's image (its log)."""
    line = re.compile(rf"session {re.escape(session)}: memory image staged here .*? in (\d+) ms")
    for node in NODES:
        path = grid.workdir / f"{node}.log"
        found = line.findall(path.read_text(errors="replace")) if path.exists() else []
        if found:
            return f"{found[0]} ms on {node}"
    return "not in the nodes' logs"


def _answer(s: Session) -> None:
    res = s.run_code(CHECK)
    assert res.error is None and res.kernel_restarted is False, res


def _fork(grid: LocalGrid, client: Client, a: Session, mb: int, stopped: str, n: int = 8) -> None:
    """Fork x``n`` with memory of running ``a`` vs ``n`` cold sessions running the setup."""
    grid.start_worker(stopped, types=TYPES, concurrency=4)
    grid.wait(lambda: stopped in grid.workers_seen(), "the stopped node again")
    _answer(a)  # running again (the second pause released it)
    time.sleep(8.0)  # both warm pools filled
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        with cpu_window() as fork_cpu:
            t0 = time.perf_counter()
            forks = a.fork(n, memory=True)
            fork_call_s = time.perf_counter() - t0
            list(pool.map(_answer, forks))
            fork_s = time.perf_counter() - t0
        nodes = {f.refresh().owner for f in forks}
        for f in forks:
            f.close()
        time.sleep(5.0)
        with cpu_window() as cold_cpu:
            t0 = time.perf_counter()
            cold = list(pool.map(lambda _: _build(client, mb)[0], range(n)))
            cold_s = time.perf_counter() - t0
        for c in cold:
            c.close()
    print(
        f"fork x{n} with memory: {fork_s * 1000:.0f} ms to {n} answering sessions "
        f"(the fork call {fork_call_s * 1000:.0f} ms; restored on {sorted(map(str, nodes))})"
    )
    print(f"  the forks' restores: {_restores(grid, {f.id for f in forks})}")
    print(f"  per fork, the machine's CPU: {fork_cpu.per(n)}")
    print(f"{n} cold sessions running the setup: {cold_s * 1000:.0f} ms")
    print(f"  per cold session, the machine's CPU: {cold_cpu.per(n)}")
    print(f"fork vs cold: {cold_s / fork_s:.2f}x faster (target >= 3x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="MB of arrays in the kernel")
    ap.add_argument("--port", type=int, default=8792)
    ap.add_argument("--settle", type=float, default=8.0, help="s for the pools to refill")
    ap.add_argument("--no-stage", action="store_true", help="nodes stage no image ahead")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/3")
    ap.add_argument("--logs", type=Path, help="copy the grid's logs here when done")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
