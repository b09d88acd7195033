"""How many batch turns the grid may run at once without starving interactive turns.

A worker node runs its direct queue, ``sbx.<type>`` and ``sbx.<type>.batch``
in one Celery worker with N threads. If batch jobs held all N threads, an
interactive turn would wait for a whole batch job. So a node lends at most
``batch_limit(N)`` threads to batch (N minus a reserve of half, at least
one), and the scheduler never has more batch turns in flight on a type than
the sum of those limits over the live nodes serving it: then the batch queue
never holds a backlog, and every node keeps a free thread for interactive work.
The worker's own gate (``worker/batch_gate.py``) enforces the per-node limit
when a node happens to take more than its share.

``CeleryCapacity`` learns each node's thread count and queues from Celery's
remote control (``inspect().stats()`` and ``active_queues()``), cached for a
few seconds; ``BatchSlots`` is the grid-wide semaphore, a Redis sorted set
(slot id -> deadline) shared by every batch and every API process.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

import redis

from sandgrid.wire import names
from sandgrid.wire.batch_limit import batch_limit
from scheduler.registry import lua_source

__all__ = [
    "PROBE_TIMEOUT_S",
    "PROBE_TTL_S",
    "BatchSlots",
    "CapacitySource",
    "CeleryCapacity",
    "InteractiveActivity",
    "StaticCapacity",
]

log = logging.getLogger(__name__)

#: How long a probe of the workers is trusted (s).
PROBE_TTL_S = 10.0
#: How long a probe waits for the workers' replies (s).
PROBE_TIMEOUT_S = 1.0


class CapacitySource(Protocol):
    """What the batch runner needs to know about the workers of a type."""

    def limits(self, sandbox_type: str) -> dict[str, int]:
        """Node name -> batch threads it may lend, for the live nodes serving the type."""
        ...


class StaticCapacity:
    """A fixed answer (tests, or a deployment that knows its nodes)."""

    def __init__(self, limits: dict[str, int]) -> None:
        self._limits = dict(limits)

    def limits(self, sandbox_type: str) -> dict[str, int]:
        return dict(self._limits)


class CeleryCapacity:
    """Node limits from Celery's remote control, cached for ``ttl_s``.

    Args:
        app: the Celery app (its broker is the grid's Redis).
        fallback: the live nodes when no worker answers (each lends one thread).
    """

    def __init__(self, app: Any, fallback: Any = None, *, ttl_s: float = PROBE_TTL_S) -> None:
        self.app = app
        self.fallback = fallback
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._cache: tuple[float, dict[str, tuple[int, set[str]]]] | None = None

    def limits(self, sandbox_type: str) -> dict[str, int]:
        want = names.batch_queue(sandbox_type)
        nodes = self._probe()
        found = {n: batch_limit(c) for n, (c, queues) in nodes.items() if want in queues}
        if found:
            return found
        live = self.fallback.live_nodes() if self.fallback is not None else []
        return {str(n): 1 for n in live}

    def _probe(self) -> dict[str, tuple[int, set[str]]]:
        with self._lock:
            if self._cache and time.monotonic() - self._cache[0] < self.ttl_s:
                return self._cache[1]
            try:
                nodes = self._ask()
            except Exception as exc:  # the broker is down: use what we knew
                log.warning("capacity probe failed: %s", exc)
                nodes = self._cache[1] if self._cache else {}
            self._cache = (time.monotonic(), nodes)
            return nodes

    def _ask(self) -> dict[str, tuple[int, set[str]]]:
        expected = len(self.fallback.live_nodes()) if self.fallback is not None else None
        inspect = self.app.control.inspect(timeout=PROBE_TIMEOUT_S, limit=expected or None)
        stats = inspect.stats() or {}
        queues = inspect.active_queues() or {}
        nodes: dict[str, tuple[int, set[str]]] = {}
        for host, st in stats.items():
            concurrency = int((st.get("pool") or {}).get("max-concurrency") or 1)
            served = {str(q.get("name")) for q in queues.get(host, [])}
            nodes[host.split("@", 1)[0]] = (concurrency, served)
        return nodes


class InteractiveActivity:
    """When this API process last started an interactive turn.

    Batches yield to interactive traffic: while interactive turns are flowing
    (one started within ``window_s``), a batch uses only ``paced_share`` of its
    slots (at least one), and each of its runner threads rests after a job for
    ``duty_gap`` times as long as the job took. Threads alone do not protect
    interactive latency on a small node: the batch jobs' processes and turns
    take the CPU, and every hop of an interactive turn (API, Redis, worker,
    dockerd, the container) waits for a core. Measured on 2 cores
    (bench/bench_batch.py): four busy lanes doubled the interactive p50 and
    tripled its p99; one lane at half duty keeps the p99 within 2x.

    Args:
        window_s: how long after an interactive turn the batch stays paced.
        paced_share: the share of batch slots used meanwhile.
        duty_gap: rest after a job, as a multiple of its duration, meanwhile.
    """

    def __init__(
        self, window_s: float = 1.0, paced_share: float = 0.25, duty_gap: float = 1.0
    ) -> None:
        self.window_s = window_s
        self.paced_share = paced_share
        self.duty_gap = duty_gap
        self._last = float("-inf")

    def mark(self) -> None:
        """An interactive turn starts (``TurnRunner.on_interactive``)."""
        self._last = time.monotonic()

    def active(self) -> bool:
        return time.monotonic() - self._last < self.window_s

    def limit(self, full: int) -> int:
        """The batch slots to use now, out of ``full``."""
        return max(1, int(full * self.paced_share)) if self.active() else full

    def gap(self, took_s: float) -> float:
        """Seconds a runner thread rests after a job that took ``took_s``."""
        return took_s * self.duty_gap if self.active() else 0.0


class BatchSlots:
    """The grid-wide semaphore of batch turns in flight on a sandbox type.

    A slot is a member of a Redis sorted set scored by its deadline, so a
    crashed API process cannot leak one (the same script as the tenants' turn
    slots: ``lua/turn_slot.lua``).
    """

    def __init__(self, client: redis.Redis[str]) -> None:
        self.redis = client
        self._take = client.register_script(lua_source("turn_slot"))

    def acquire(self, sandbox_type: str, slot: str, limit: int, ttl_s: float) -> bool:
        """Take a slot unless ``limit`` are taken; it lapses after ``ttl_s``."""
        now = time.time()
        key = names.batch_slots_key(sandbox_type)
        args = [slot, limit, now, now + ttl_s, int(ttl_s * 1000) + 60_000]
        return bool(self._take(keys=[key], args=args))

    def release(self, sandbox_type: str, slot: str) -> None:
        self.redis.zrem(names.batch_slots_key(sandbox_type), slot)

    def in_flight(self, sandbox_type: str) -> int:
        key = names.batch_slots_key(sandbox_type)
        return int(self.redis.zcount(key, time.time(), "+inf"))
