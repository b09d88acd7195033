"""What the audit trail and the metrics add to a turn, measured in the same run.

Run: ``python3 bench/bench_ops.py [--runs 2000] [--redis redis://127.0.0.1:6379/13]``.

Prints p50/p99 of: one ``AuditLog.record`` of an exec (digest + XADD) against a
plain Redis ``PING`` round trip (the floor of any write), with their ratio; the
cost of ``scheduler.metrics.observe_turn`` and ``worker.metrics.observe_outcome``
per turn; and the export rate of ``AuditExporter`` (records/s into a local store).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from _services import shared_redis_url

from sandgrid.models import ExecRequest, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.objects.local import LocalObjects
from scheduler import metrics as api_metrics
from scheduler.audit.export import AuditExporter
from scheduler.audit.log import AuditLog
from worker import metrics as node_metrics

TENANT = "bench-ops"


def _times(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    out.sort()
    return statistics.median(out), out[int(len(out) * 0.99) - 1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    args = ap.parse_args()
    url = shared_redis_url(args.redis)  # the admin user once credentials are generated
    r: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
    r.delete(names.audit_key(TENANT))
    with tempfile.TemporaryDirectory() as tmp:
        log = AuditLog(r, LocalObjects(Path(tmp)), command_chars=80)
        request = ExecRequest(shell="python3 -c 'print(1)' " + "x" * 200)
        ping = _times(r.ping, args.runs)
        rec = _times(lambda: log.record(TENANT, "s-1", "exec", command=request), args.runs)
        when = "2026-01-01T00:00:00Z"
        info = SessionInfo.model_validate(
            {
                "id": "s-1",
                "tenant": TENANT,
                "type": "python",
                "quotas": {},
                "created_at": when,
                "last_used": when,
            }
        )
        job = TurnJob(turn_id="t", session=info, op=ExecOp(request=request))
        out = TurnOutcome(
            turn_id="t",
            node="n",
            ok=True,
            timings={"worker_ms": 3.0, "sandbox_ms": 2.0, "snapshot_ms": 1.0},
        )
        timings = {"api_ms": 1.0, "queue_ms": 2.0, "total_ms": 6.0}
        api = _times(lambda: api_metrics.observe_turn("python", "exec", "ok", timings), args.runs)
        node = _times(lambda: node_metrics.observe_outcome(job, out), args.runs)
        exporter = AuditExporter(r, log.objects, interval_s=60, keep_s=0)
        t = time.perf_counter()
        n = exporter.export(now=time.time() + 1)
        rate = n / (time.perf_counter() - t)
    r.delete(names.audit_key(TENANT))
    print(f"redis PING            p50 {ping[0]:8.1f} us  p99 {ping[1]:8.1f} us")
    print(
        f"audit record (exec)   p50 {rec[0]:8.1f} us  p99 {rec[1]:8.1f} us"
        f"  ratio to PING p50 {rec[0] / ping[0]:.2f}x"
    )
    print(f"API observe_turn      p50 {api[0]:8.1f} us  p99 {api[1]:8.1f} us")
    print(f"node observe_outcome  p50 {node[0]:8.1f} us  p99 {node[1]:8.1f} us")
    print(f"export                {n} records at {rate:,.0f} records/s")


if __name__ == "__main__":
    main()
