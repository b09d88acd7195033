#!/usr/bin/env python3
"""Workspace snapshots through the store vs ``tar | gzip``, both on the real MinIO.

    python3 bench/bench_snapshots.py            # all three workspaces (~1-2 min on 2 cores)
    python3 bench/bench_snapshots.py --only 100mb --reps 5

For each workspace (1 MB, 100 MB, 10,000 files; host directories standing for
a sandbox's /workspace, through ``HostDirBackend``'s scan/pack/unpack: the
in-sandbox agent's own code, run on host directories):

- full snapshot: scan (hashing every file), pack, verify, upload blobs, manifest,
  pointer, into a new tenant (nothing to dedupe against); vs ``tar -c | gzip -1``
  of the same tree and one ``put_object``.
- full restore into an empty sandbox: manifest, parallel blob downloads,
  verification of every hash, tar, unpack; vs ``get_object`` + ``gzip -dc | tar -x``.
- unchanged: a snapshot with the previous manifest. ``store`` is the store's
  own cost (the scan compared with the previous manifest, no round trip);
  ``e2e`` adds the host scan (a stat walk, hashes cached as the agent does).
- one file changed: a snapshot after rewriting one file (e2e).

Each figure is the median of ``--reps`` runs. Text files are distinct slices of
generated source-like text; the 100 MB case is half text, half random bytes.
Targets: restore(100 MB) <= tar baseline; unchanged (store) <= 5 ms; one-file
change <= 5% of the full snapshot.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _services import minio_settings
from minio import Minio

from tests.support.hostdir import HostDirBackend
from tests.support.snapshot_stores import minio_store
from worker.snapshots import SnapshotStore, restore_sandbox, snapshot_sandbox

ROOTS = ["/workspace", "/home/sandbox"]
MB = 1 << 20
WORDS = ["def", "class", "return", "import", "self", "value", "result", "data", "file", "path",
         "error", "None", "True", "for", "while", "with", "yield", "print", "list", "dict",
         "open", "read", "write", "the", "of", "and", "to", "in", "is", "it"]  # fmt: skip


@dataclass
class Case:
    name: str
    files: int
    size: Callable[[random.Random], int]
    binary_share: float
    dirs: int


CASES = [
    Case("1mb", 50, lambda r: 20 << 10, 0.0, dirs=5),
    Case("100mb", 100, lambda r: MB, 0.5, dirs=10),
    Case("10k", 10_000, lambda r: r.randint(200, 3800), 0.0, dirs=100),
]


@dataclass
class Row:
    case: str
    mb: float
    files: int
    ours: dict[str, float] = field(default_factory=dict)
    tar: dict[str, float] = field(default_factory=dict)
    parts: dict[str, float] = field(default_factory=dict)


def generate(case: Case, sbx: Path, seed: int = 7) -> int:
    """Write the case's tree under ``sbx``; every file distinct (no free dedupe)."""
    rng = random.Random(seed)
    lines = (" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(400_000))
    base = "\n".join(f"{line}  # {i}" for i, line in enumerate(lines)).encode()
    total = 0
    for root in ("workspace", "home/sandbox"):
        (sbx / root).mkdir(parents=True, exist_ok=True)
    for i in range(case.files):
        size = case.size(rng)
        folder = sbx / "workspace" / f"pkg{i % case.dirs:03d}"
        folder.mkdir(exist_ok=True)
        head = f"# file {i}\n".encode()
        if rng.random() < case.binary_share:
            data = head + rng.randbytes(size - len(head))
        else:
            start = rng.randrange(0, len(base) - size)
            data = head + base[start : start + size - len(head)]
        (folder / f"f{i:05d}.dat").write_bytes(data)
        total += len(data)
    (sbx / "home/sandbox/.bashrc").write_text("export PS1='$ '\n")
    return total


def median_time(
    reps: int, fn: Callable[[int], Any], setup: Callable[[int], Any] | None = None
) -> tuple[float, Any]:
    """Median wall time of ``fn(rep)`` over ``reps`` runs (after an untimed
    ``setup(rep)``), and the last result."""
    times, out = [], None
    for rep in range(reps):
        if setup is not None:
            setup(rep)
        t0 = time.perf_counter()
        out = fn(rep)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def fresh_dir(path: Path) -> Path:
    """An empty sandbox, with the disk's dirty pages flushed so that neither
    contender pays for the other's writes."""
    shutil.rmtree(path, ignore_errors=True)
    (path / "workspace").mkdir(parents=True)
    os.sync()
    return path


def tar_snapshot(client: Minio, bucket: str, sbx: Path, key: str) -> None:
    cmd = f"tar -C {sbx} -cf - workspace home/sandbox | gzip -1"
    data = subprocess.run(cmd, shell=True, check=True, capture_output=True).stdout
    client.put_object(bucket, key, io.BytesIO(data), len(data))


def tar_restore(client: Minio, bucket: str, dst: Path, key: str) -> None:
    response = client.get_object(bucket, key)
    try:
        data = response.read()
    finally:
        response.close()
        response.release_conn()
    subprocess.run(f"gzip -dc | tar -C {dst} -xf -", shell=True, check=True, input=data)


def run_case(case: Case, store: SnapshotStore, client: Minio, tmp: Path, reps: int) -> Row:
    sbx, dst = tmp / f"{case.name}-src", tmp / f"{case.name}-dst"
    row = Row(case.name, generate(case, sbx) / MB, case.files)
    session = "s-bench"

    def full(rep: int) -> Any:  # a new tenant and a cold hash cache: everything is new
        return snapshot_sandbox(HostDirBackend(), sbx, store, f"{case.name}-{rep}", session, None)

    row.ours["snapshot"], ref = median_time(reps, full)
    tenant = f"{case.name}-{reps - 1}"

    def restore(rep: int) -> Any:
        return restore_sandbox(HostDirBackend(), dst, store, tenant, session, ref)

    row.ours["restore"], manifest = median_time(reps, restore, lambda _: fresh_dir(dst))
    backend = HostDirBackend()
    backend.scan(sbx, ROOTS)  # warm the hash cache, as the agent's is after a turn
    row.ours["unchanged_e2e"], none = median_time(
        reps * 3, lambda _: snapshot_sandbox(backend, sbx, store, tenant, session, manifest)
    )
    assert none is None
    scan = backend.scan(sbx, ROOTS)
    row.ours["unchanged_store"], _ = median_time(
        reps * 3, lambda _: store.prepare(tenant, session, scan, manifest)
    )
    previous = [manifest]

    def change_one(rep: int) -> None:  # untimed: the turn that changed the file
        victim = next((sbx / "workspace").rglob(f"f{7 + rep:05d}.dat"))
        victim.write_bytes(victim.read_bytes()[::-1] + b"changed")

    def one_file(rep: int) -> Any:
        ref = snapshot_sandbox(backend, sbx, store, tenant, session, previous[0])
        previous[0] = ref.manifest
        return ref

    row.ours["one_file"], last = median_time(reps, one_file, change_one)
    row.parts = {k: v for k, v in last.stats.items() if k.endswith("_ms")}
    row.parts["stored entries"] = last.stats["stored_entries"]
    row.tar = tar_baseline(case, client, store.objects.bucket, sbx, tmp, reps)
    for path in (sbx, dst, tmp / "tar-dst"):
        shutil.rmtree(path, ignore_errors=True)
    return row


def tar_baseline(
    case: Case, client: Minio, bucket: str, sbx: Path, tmp: Path, reps: int
) -> dict[str, float]:
    """The baseline's median snapshot and restore: one tar.gz of the sandbox, one object."""
    key = f"tar-baseline/{case.name}.tar.gz"
    out: dict[str, float] = {}
    out["snapshot"], _ = median_time(reps, lambda _: tar_snapshot(client, bucket, sbx, key))
    out["restore"], _ = median_time(
        reps,
        lambda _: tar_restore(client, bucket, tmp / "tar-dst", key),
        lambda _: fresh_dir(tmp / "tar-dst"),
    )
    return out


def round_trip(store: SnapshotStore, reps: int = 31) -> float:
    """Median time of one small PUT to the store: the unit a snapshot's sequential
    steps cost (a durable snapshot needs two: its blobs, then its pointer)."""
    times = []
    for i in range(reps):
        t0 = time.perf_counter()
        store.objects.put(f"bench-rtt/{i}", b"x" * 200)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _vs(ours: dict[str, float], tar: dict[str, float], key: str, width: int) -> str:
    return f"{ours[key] * 1e3:>{width}.1f}{tar[key] * 1e3:>9.1f}{ours[key] / tar[key]:>7.2f}"


def report(rows: list[Row], rtt: float) -> bool:
    print(
        f"{'workspace':<10}{'size':>9}{'files':>7} |{'snapshot ms':>12}{'tar|gz':>9}{'ratio':>7}"
        f" |{'restore ms':>11}{'tar|gz':>9}{'ratio':>7} |{'unchanged ms':>16}"
        f" |{'1 file ms':>10}{'/ full':>8}"
    )
    print(f"{'':<26} |{'':>28} |{'':>27} |{'store / e2e':>16} |")
    for r in rows:
        o, t = r.ours, r.tar
        print(
            f"{r.case:<10}{r.mb:>7.1f}MB{r.files:>7} |{_vs(o, t, 'snapshot', 12)} |"
            f"{_vs(o, t, 'restore', 11)} |"
            f"{o['unchanged_store'] * 1e3:>7.2f} / {o['unchanged_e2e'] * 1e3:>6.1f} |"
            f"{o['one_file'] * 1e3:>10.1f}{o['one_file'] / o['snapshot']:>8.1%}"
        )
    print(f"\none store round trip (a 200-byte PUT), median: {rtt * 1e3:.2f} ms")
    print("one-file change, where the time goes (last run, ms):")
    for r in rows:
        print(
            f"  {r.case:<8}"
            + "  ".join(f"{k.removesuffix('_ms')} {v:.1f}" for k, v in r.parts.items())
        )
    checks: list[tuple[str, bool]] = []
    by = {r.case: r for r in rows}
    if "100mb" in by:
        o, t = by["100mb"].ours, by["100mb"].tar
        checks.append(("restore of 100 MB no slower than tar | gzip", o["restore"] <= t["restore"]))
    for r in rows:
        fast = r.ours["unchanged_store"] <= 5e-3
        checks.append((f"unchanged {r.case}: store side <= 5 ms", fast))
        budget = 0.05 * r.ours["snapshot"]
        name = f"one-file change {r.case}: <= 5% of a full snapshot"
        if budget < 2 * rtt:
            name += (
                f" (floor-bound: 5% is {budget * 1e3:.1f} ms, less than the two store round"
                f" trips, {2 * rtt * 1e3:.1f} ms, that a durable snapshot needs)"
            )
        checks.append((name, r.ours["one_file"] <= budget))
    print()
    for name, passed in checks:
        print(f"  [{'ok' if passed else 'MISS'}] {name}")
    return all(passed for _, passed in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description="snapshot store vs tar | gzip on MinIO")
    parser.add_argument("--only", choices=[c.name for c in CASES], action="append")
    parser.add_argument("--reps", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--tmp", default=None, help="scratch directory (default: system temp)")
    args = parser.parse_args()
    s = minio_settings()  # SANDGRID_MINIO__*, else the generated keys
    bucket = f"sgbench-{uuid.uuid4().hex[:10]}"
    store = minio_store(s.endpoint, s.access_key, s.secret_key, bucket, secure=s.secure)
    client = Minio(s.endpoint, s.access_key, s.secret_key, secure=s.secure)
    print(f"MinIO {s.endpoint}, bucket {bucket}, {os.cpu_count()} CPUs, median of {args.reps}")
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sg-bench-", dir=args.tmp) as tmp:
            for case in CASES:
                if args.only and case.name not in args.only:
                    continue
                t0 = time.perf_counter()
                rows.append(run_case(case, store, client, Path(tmp), args.reps))
                print(f"  {case.name}: {time.perf_counter() - t0:.1f} s", flush=True)
        print()
        return 0 if report(rows, round_trip(store)) else 1
    finally:
        store.objects.drop_bucket()
        store.close()


if __name__ == "__main__":
    sys.exit(main())
