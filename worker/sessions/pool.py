"""Warm pools of sandboxes, one per sandbox type, so a session starts without a cold create.

A container's life in the pool: created and answering -> ``warm`` (in the pool)
-> ``leased`` to exactly one session -> ``released`` -> ``destroyed``; one that
fails its health check goes to ``error`` and is destroyed. A container serves
one session of one tenant in its life: release and discard always destroy it,
and nothing ever puts a leased container back, "cleaned" or not.

Warm containers are made with the type's pool quotas (default ``Quotas()``)
and empty ``sandgrid.session``/``sandgrid.tenant`` labels: Docker labels are
fixed at creation and the session is not known yet, so ownership lives in the
pool, the node's session table and the registry's lease (see
``worker.quotas``). Container limits are fixed at creation too: a lease asking
for other quotas gets a container created on the spot, labelled with its
session.

Thread-safe: the Celery worker runs turns in a thread pool, all sharing one
``WarmPool``. A background thread refills each type to its target; creating,
pinging and destroying containers happen outside the lock.

The target follows demand (issue 22.3, ``worker.sessions.demand``): between
the type's floor (``pool_size``) and its ceiling (``pool_max``, else
``SANDGRID_WORKER__POOL_MAX``), at most ``SANDGRID_WORKER__POOL_TOTAL`` across
the node's types; the refill thread destroys the surplus when it falls. The
node's metrics show it (``sandgrid_pool_target``). What waits is a
``worker.sessions.warm_set.WarmSet``; a take pings only a sandbox it cannot
trust (``_trusted``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandgrid.errors import CapacityError, SandgridError
from sandgrid.models import Quotas
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.demand import DEMAND_WINDOW_S, Demand, next_to_fill
from worker.sessions.pool_protocol import BackendFor
from worker.sessions.warm_set import WarmSet

__all__ = [
    "HEALTH_PING_S",
    "HEALTH_TRUST_S",
    "REFILL_RETRY_S",
    "TRIM_TICK_S",
    "PoolStats",
    "WarmPool",
]

log = logging.getLogger(__name__)

REFILL_RETRY_S = 2.0
HEALTH_PING_S = 2.0
HEALTH_TRUST_S = 30.0
"""A warm ping this recent, on a quiet channel, stands for the ping of a take."""
TRIM_TICK_S = 1.0
"""How often the idle refill thread looks again (a target falls as takes leave the window)."""


@dataclass
class PoolStats:
    """Counters of one sandbox type's pool."""

    warm: int = 0
    leased: int = 0
    hits: int = 0
    misses: int = 0
    unhealthy: int = 0
    created: int = 0
    create_failures: int = 0
    creating: int = 0
    target: int = 0


class WarmPool:
    """Warm sandboxes per type, each handed out once.

    Args:
        backend_for: the backend that runs a sandbox type, or one backend for all.
        floors: the fewest warm containers to keep per sandbox type (its ``pool_size``).
        quotas: the quotas warm containers of a type are made with (default
            ``Quotas()``); a lease asking for other quotas is created cold.
        refill_retry_s: the pause after a failed refill before trying again.
        trust_s: how long a warm sandbox's last answer spares it the take's ping.
        ceiling: the most warm containers demand may raise a type to (never
            below its floor; 0: the target stays at the floor).
        ceilings: a ceiling per type, over ``ceiling``.
        total: the most warm sandboxes (made or being made) across all types,
            floors filled first (0: no cap).
        window_s: how far back takes count; clock: monotonic seconds (tests).
    """

    def __init__(
        self,
        backend_for: BackendFor | SandboxManager,
        floors: dict[str, int],
        *,
        quotas: dict[str, Quotas] | None = None,
        refill_retry_s: float = REFILL_RETRY_S,
        trust_s: float = HEALTH_TRUST_S,
        ceiling: int = 0,
        ceilings: dict[str, int] | None = None,
        total: int = 0,
        window_s: float = DEMAND_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(backend_for, SandboxManager):
            backend = backend_for
            self.backend_for: BackendFor = lambda _type: backend
        else:
            self.backend_for = backend_for
        self.floors = dict(floors)
        self.ceiling = ceiling
        self._ceilings = dict(ceilings or {})
        self.total = total
        self._demand = Demand(window_s, clock)
        self._clock = clock
        self._quotas = dict(quotas or {})
        self._retry = refill_retry_s
        self._trust_s = trust_s
        self._lock = threading.Lock()
        self._warm = WarmSet(self.floors)
        self._leased: dict[str, Sandbox] = {}
        self._creating: dict[str, int] = dict.fromkeys(self.floors, 0)
        self._stats: dict[str, PoolStats] = {t: PoolStats() for t in self.floors}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- life cycle ------------------------------------------------------------

    def start(self) -> None:
        """Start the refill thread (it fills every type to its target at once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._refill_loop, name="sandgrid-pool", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def fill(self) -> None:
        """Fill every type to its target now, in the calling thread (startup, tests)."""
        while (sandbox_type := self._deficit()) is not None:
            if not self._refill_one(sandbox_type):
                return

    def close(self) -> None:
        """Stop refilling and destroy every container the pool owns, warm or leased."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            owned = self._warm.drain() + list(self._leased.values())
            self._leased.clear()
        for sbx in owned:
            self._destroy(sbx)

    def set_target(
        self,
        sandbox_type: str,
        target: int,
        quotas: Quotas | None = None,
        *,
        ceiling: int | None = None,
    ) -> None:
        """Keep at least ``target`` warm sandboxes of a type from now on (its floor: a
        type the node starts or stops serving at runtime, 25.1; 0 keeps none), and
        at most ``ceiling`` (default: the pool's); the surplus warm ones are destroyed."""
        with self._lock:
            self.floors[sandbox_type] = target
            if ceiling is not None:
                self._ceilings[sandbox_type] = ceiling
            self._warm.add_type(sandbox_type)
            self._creating.setdefault(sandbox_type, 0)
            self._stats.setdefault(sandbox_type, PoolStats())
            if quotas is not None:
                self._quotas[sandbox_type] = quotas
            surplus = self._warm.above(sandbox_type, self._target(sandbox_type))
        for sbx in surplus:
            self._destroy(sbx)
        self._wake.set()

    def target(self, sandbox_type: str) -> int:
        """The warm sandboxes of a type the pool keeps ahead now (see the module docstring)."""
        with self._lock:
            return self._target(sandbox_type)

    def trim(self) -> int:
        """Destroy the warm sandboxes above each type's target now (demand fell); how many.

        The oldest go first: the take would have pinged them.
        """
        with self._lock:
            surplus = [
                sbx
                for t in self._warm.types()
                for sbx in self._warm.above(t, self._target(t), oldest=True)
            ]
        for sbx in surplus:
            self._destroy(sbx)
        return len(surplus)

    # ---- leasing ---------------------------------------------------------------

    def quotas_for(self, sandbox_type: str) -> Quotas:
        """The quotas warm containers of this type are made with."""
        return self._quotas.get(sandbox_type) or Quotas.model_validate({})

    def acquire(
        self,
        sandbox_type: str,
        quotas: Quotas | None = None,
        *,
        session_id: str,
        tenant: str,
    ) -> Sandbox:
        """A sandbox for one session: warm if one is ready (no waiting), else created now.

        Args:
            sandbox_type: the session's type.
            quotas: the session's quotas; warm containers serve only the pool's.
            session_id: the one session this container will ever serve.
            tenant: that session's tenant.

        Returns:
            A ``leased`` sandbox (a warm one answered lately and its channel is
            quiet, or it answered a ping just now).

        Raises:
            CapacityError: the pool is closed, or no container could be made.
            InvalidInput: bad type or quotas (from the backend).
        """
        if self._stop.is_set():
            raise CapacityError("the warm pool is closed", operation="acquire")
        wanted = quotas or self.quotas_for(sandbox_type)
        poolable = wanted == self.quotas_for(sandbox_type)  # else no warm one could serve it
        if poolable:
            with self._lock:
                self._demand.took(sandbox_type)
        sbx = self._take_warm(sandbox_type) if poolable else None
        self._count(sandbox_type, "misses" if sbx is None else "hits")
        if sbx is None:
            sbx = self._create_cold(sandbox_type, wanted, session_id, tenant, poolable)
        sbx.state, sbx.session_id, sbx.tenant = "leased", session_id, tenant
        with self._lock:
            closed = self._stop.is_set()
            if not closed:
                self._leased[sbx.id] = sbx
        if closed:
            self._destroy(sbx)
            raise CapacityError("the warm pool closed during acquire", operation="acquire")
        self._wake.set()
        return sbx

    def release(self, sbx: Sandbox) -> None:
        """The session is done with its sandbox: destroy it (never reused). Idempotent."""
        with self._lock:
            self._leased.pop(sbx.id, None)
        if sbx.state == "leased":
            sbx.state = "released"
        self._destroy(sbx)

    def discard(self, sbx: Sandbox) -> None:
        """Destroy a sandbox after its session or a failure (lost, failed restore)."""
        self.release(sbx)

    def container_ids(self) -> set[str]:
        """Ids of every container the pool holds (warm) or handed out (leased): for the reaper."""
        with self._lock:
            return {s.id for s in self._warm} | set(self._leased)

    def prune(self, gone: set[str]) -> int:
        """Destroy the warm sandboxes whose container no longer runs; how many.

        After the Docker daemon restarted, every container of the pool exited:
        they are removed here and the refill thread makes new ones.

        Args:
            gone: ids of containers the runtime no longer reports running.
        """
        with self._lock:
            dead = self._warm.remove(gone)
        for sbx in dead:
            log.warning("warm sandbox %s is gone (the runtime restarted?)", sbx.name)
            self._count(sbx.sandbox_type, "unhealthy")
            sbx.state = "error"
            self._destroy(sbx)
        if dead:
            self._wake.set()
        return len(dead)

    def warm_count(self, sandbox_type: str) -> int:
        with self._lock:
            return self._warm.count(sandbox_type)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Counters per type, with the current warm and leased counts."""
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for t, st in self._stats.items():
                st.warm = self._warm.count(t)
                st.leased = sum(1 for s in self._leased.values() if s.sandbox_type == t)
                st.creating = self._creating.get(t, 0)
                st.target = self._target(t)
                out[t] = dict(vars(st))
            return out

    # ---- internals -------------------------------------------------------------

    def _take_warm(self, sandbox_type: str) -> Sandbox | None:
        """Pop warm sandboxes until one is alive: its answer recent and its channel
        quiet, or else a ping answered now; the dead are destroyed."""
        while True:
            with self._lock:
                got = self._warm.take(sandbox_type)
            if got is None:
                return None
            sbx, answered = got
            if self._trusted(sbx, answered):
                return sbx
            try:
                self.backend_for(sandbox_type).ping(sbx, timeout=HEALTH_PING_S)
                return sbx
            except SandgridError as exc:
                log.warning("warm sandbox %s failed its health check: %s", sbx.name, exc)
                self._count(sandbox_type, "unhealthy")
                sbx.state = "error"
                self._destroy(sbx)

    def _create_cold(
        self, sandbox_type: str, quotas: Quotas, session_id: str, tenant: str, poolable: bool
    ) -> Sandbox:
        """A miss: create the session's sandbox now; a poolable one's time hides no
        demand (``Demand``)."""
        t0 = self._clock()
        try:
            backend = self.backend_for(sandbox_type)
            return backend.create(sandbox_type, quotas, session_id=session_id, tenant=tenant)
        finally:
            if poolable:
                with self._lock:
                    self._demand.missed(sandbox_type, t0, self._clock())

    def _trusted(self, sbx: Sandbox, answered: float | None) -> bool:
        """Whether a warm sandbox may skip the take's ping (issue 22.3: a round trip on
        every pool hit, ~1 ms under gVisor): its warm ping answered less than
        ``trust_s`` ago and its channel is quiet (``AgentClient.quiet``: one ``poll``,
        no round trip). A container that died has closed its stream, so the poll sees
        it and the sandbox gets the ping, fails it and is destroyed; an older one is
        pinged, which also catches an agent that hangs."""
        if answered is None or time.monotonic() - answered >= self._trust_s:
            return False
        return sbx.channel is not None and sbx.channel.quiet()

    def _target(self, sandbox_type: str) -> int:
        """The type's target now; the caller holds the lock."""
        floor = self.floors.get(sandbox_type, 0)
        ceiling = self._ceilings.get(sandbox_type, self.ceiling)
        return self._demand.target(sandbox_type, floor, ceiling)

    def _deficit(self) -> str | None:
        """A type below its target, with one creation reserved for it."""
        with self._lock:
            if self._stop.is_set():
                return None
            have = {t: self._warm.count(t) + self._creating[t] for t in self.floors}
            targets = {t: self._target(t) for t in self.floors}
            t = next_to_fill(have, self.floors, targets, self.total)
            if t is not None:
                self._creating[t] += 1
            return t

    def _refill_loop(self) -> None:
        while not self._stop.is_set():
            sandbox_type = self._deficit()
            if sandbox_type is None:
                self.trim()
                self._wake.wait(TRIM_TICK_S)  # a target may fall with time alone
                self._wake.clear()
            elif not self._refill_one(sandbox_type):
                self._stop.wait(self._retry)

    def _refill_one(self, sandbox_type: str) -> bool:
        """Create one warm sandbox (its creation was reserved by ``_deficit``)."""
        t0 = self._clock()
        try:
            backend = self.backend_for(sandbox_type)
            sbx = backend.create(sandbox_type, self.quotas_for(sandbox_type))
        except SandgridError as exc:
            log.error("cannot warm a %s sandbox: %s", sandbox_type, exc)
            self._count(sandbox_type, "create_failures")
            return False
        finally:
            with self._lock:
                self._creating[sandbox_type] -= 1
        self._count(sandbox_type, "created")
        try:
            backend.warm(sbx)
        except SandgridError as exc:
            log.warning("a new warm %s sandbox failed its first ping: %s", sandbox_type, exc)
            self._count(sandbox_type, "unhealthy")
            self._destroy(sbx)
            return False
        with self._lock:  # a target lowered meanwhile (the type stopped, 25.1) keeps none
            self._demand.created(sandbox_type, self._clock() - t0)
            keep = not self._stop.is_set() and self._warm.count(sandbox_type) < self._target(
                sandbox_type
            )
            if keep:
                self._warm.put(sbx)
        if not keep:
            self._destroy(sbx)
        return True

    def _count(self, sandbox_type: str, field: str) -> None:
        with self._lock:
            st = self._stats.setdefault(sandbox_type, PoolStats())
            setattr(st, field, getattr(st, field) + 1)

    def _destroy(self, sbx: Sandbox) -> None:
        try:
            self.backend_for(sbx.sandbox_type).destroy(sbx)
        except Exception:  # the reaper removes what could not be removed here
            log.exception("cannot destroy sandbox %s", sbx.name)
