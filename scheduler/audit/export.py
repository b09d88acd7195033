"""The audit exporter: moves old stream records into per-day JSONL segments.

Objects are immutable, so the trail in the store is a series of segments,
``t/<tenant>/audit/<yyyy-mm-dd>/<first-id>.jsonl``, one per export and day.
The order is export first, trim after: a crash between the two leaves the
records in both places (a reader drops the duplicates by id), and the next
export writes the same segment key again with the same records first, so
nothing is ever lost or counted twice. One API process exports at a time
(a lock key in Redis with a TTL): two exporters could otherwise write one
segment key with different record sets, and trim what the other did not write.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections import defaultdict

import redis as redis_lib

from sandgrid.wire import names
from sandgrid.wire.objects import ObjectStore
from sandgrid.wire.objects.keys import audit_segment_key
from sandgrid.wire.periodic import Periodic
from scheduler import metrics
from scheduler.audit.log import day_of, parse_entry
from scheduler.audit.network import NetworkCollector

__all__ = ["EXPORT_BATCH", "AuditExporter"]

log = logging.getLogger(__name__)

#: Records read from a stream per round (one segment per day of them).
EXPORT_BATCH = 5000


class AuditExporter:
    """A daemon thread exporting every ``interval_s`` the records older than ``keep_s``,
    after collecting the network decisions of every session (``NetworkCollector.sweep``).

    Args:
        client: the registry's Redis.
        objects: where the segments go.
        interval_s: seconds between exports (``SANDGRID_AUDIT__EXPORT_INTERVAL_S``).
        keep_s: records younger than this stay in the stream only.
    """

    def __init__(
        self,
        client: redis_lib.Redis[str],
        objects: ObjectStore,
        *,
        interval_s: float,
        keep_s: float,
    ) -> None:
        self.redis = client
        self.objects = objects
        self.interval_s = interval_s
        self.keep_s = keep_s
        self.network = NetworkCollector(client)
        self._loop = Periodic(
            self.export, interval_s, "audit", log, on_error=_count_failure, join_s=10.0
        )

    def export(self, now: float | None = None) -> int:
        """One export of every tenant's stream; how many records were exported.

        Returns 0 without exporting when another process holds the export lock.

        Raises:
            redis.RedisError, Exception of the object store: the export stopped;
                what was not trimmed is exported again next time.
        """
        cutoff_ms = int(((now or time.time()) - self.keep_s) * 1000)
        lock, token = names.audit_export_lock_key(), secrets.token_hex(8)
        if not self.redis.set(lock, token, nx=True, px=int(max(self.interval_s, 60) * 2000)):
            return 0
        try:
            self.network.sweep()  # the decisions no turn, close or read has collected yet
            keys = sorted(self.redis.scan_iter(match=names.audit_key_pattern(), count=500))
            return sum(self._export_stream(k, cutoff_ms) for k in keys)
        finally:
            if self.redis.get(lock) == token:
                self.redis.delete(lock)

    def _export_stream(self, key: str, cutoff_ms: int) -> int:
        tenant, done = names.audit_tenant_from_key(key), 0
        while True:
            entries = self.redis.xrange(key, min="-", max=f"({cutoff_ms}-0", count=EXPORT_BATCH)
            if not entries:
                return done
            days: dict[str, list[str]] = defaultdict(list)
            firsts: dict[str, str] = {}
            for entry_id, fields in entries:
                rec = parse_entry(entry_id, fields)
                # The day of the id, not of ``ts``: segments then hold disjoint id
                # ranges in the order of their names, which a reader relies on.
                rec_day = day_of(int(entry_id.split("-")[0]) / 1000)
                line = rec.model_dump_json(exclude_none=True) if rec is not None else None
                firsts.setdefault(rec_day, entry_id)
                days[rec_day].append(line or _raw_line(entry_id, fields))
            for day, lines in days.items():
                body = ("\n".join(lines) + "\n").encode()
                self.objects.put(audit_segment_key(tenant, day, firsts[day]), body)
            last = entries[-1][0]
            ms, _, seq = last.partition("-")
            self.redis.xtrim(key, minid=f"{ms}-{int(seq) + 1}", approximate=False)
            done += len(entries)
            if len(entries) < EXPORT_BATCH:
                return done

    # ---- life cycle --------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()


def _count_failure() -> None:
    """A failed export counts as an object-store error (the usual cause)."""
    metrics.STORE_ERRORS.labels(store="objects", operation="audit_export").inc()


def _raw_line(entry_id: str, fields: dict[str, str]) -> str:
    """An unreadable entry, kept verbatim (readers skip it; an operator can read it)."""
    return json.dumps({"id": entry_id, "raw": fields})
