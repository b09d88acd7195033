"""Warm pools: containers started ahead of demand, one pool per sandbox type.

States: ``warm`` (in the pool, agent answering) -> ``leased`` (serving one
session) -> ``destroyed``; a container that fails its health check or its
creation goes to ``error`` and is destroyed. A container serves one session in
its life: ``discard`` destroys it, and nothing ever puts a leased container
back into a pool.

Warm containers are made with the type's default ``Quotas``: container limits
are fixed at creation, so a session asking for other quotas gets a fresh
container instead (a cold start). Docker labels are fixed at creation too, so a
warm container's ``sandgrid.session`` label is empty; the session it serves is
in the node's session table and the registry's lease.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from scheduler.errors import SandgridError
from scheduler.models import Quotas
from worker.backends.base import Sandbox, SandboxBackend

__all__ = ["WarmPool"]

log = logging.getLogger(__name__)

DEFAULT_QUOTAS = Quotas()
REFILL_RETRY_S = 2.0


class WarmPool:
    """Warm containers per sandbox type, refilled in the background.

    Args:
        backend_for: the backend that runs a sandbox type.
        targets: how many warm containers to keep per type.
    """

    def __init__(self, backend_for: Callable[[str], SandboxBackend], targets: dict[str, int]):
        self.backend_for = backend_for
        self.targets = dict(targets)
        self._warm: dict[str, deque[Sandbox]] = {t: deque() for t in targets}
        self._leased: dict[str, Sandbox] = {}
        self._creating: dict[str, int] = dict.fromkeys(targets, 0)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- life cycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the refill thread (it fills every pool to its target)."""
        self._thread = threading.Thread(target=self._refill_loop, name="sandgrid-pool", daemon=True)
        self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop refilling and destroy every container the pool holds or leased."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            owned = [s for q in self._warm.values() for s in q] + list(self._leased.values())
            for q in self._warm.values():
                q.clear()
            self._leased.clear()
        for sbx in owned:
            self._destroy(sbx)

    # ---- hand-out ---------------------------------------------------------------------

    def acquire(
        self,
        sandbox_type: str,
        quotas: Quotas | None = None,
        *,
        session_id: str,
        tenant: str,
    ) -> Sandbox:
        """A sandbox for one session: a healthy warm one, or a fresh one.

        Raises:
            CapacityError: no container could be created.
        """
        quotas = quotas or DEFAULT_QUOTAS
        sbx = self._take_warm(sandbox_type) if quotas == DEFAULT_QUOTAS else None
        if sbx is None:
            backend = self.backend_for(sandbox_type)
            sbx = backend.create(sandbox_type, quotas, session_id=session_id, tenant=tenant)
        sbx.state, sbx.session_id, sbx.tenant = "leased", session_id, tenant
        with self._lock:
            self._leased[sbx.id] = sbx
        self._wake.set()
        return sbx

    def discard(self, sbx: Sandbox) -> None:
        """Destroy a container after its session; it never serves another."""
        with self._lock:
            self._leased.pop(sbx.id, None)
        self._destroy(sbx)

    def container_ids(self) -> set[str]:
        """Ids of every container the pool holds (warm) or handed out (leased)."""
        with self._lock:
            return {s.id for q in self._warm.values() for s in q} | set(self._leased)

    def warm_count(self, sandbox_type: str) -> int:
        with self._lock:
            return len(self._warm.get(sandbox_type, ()))

    def _take_warm(self, sandbox_type: str) -> Sandbox | None:
        """Pop warm containers until one passes the health check (a ping)."""
        while True:
            with self._lock:
                queue = self._warm.get(sandbox_type)
                if not queue:
                    return None
                sbx = queue.popleft()
            try:
                self.backend_for(sandbox_type).ping(sbx)
                return sbx
            except SandgridError as exc:
                log.warning("warm sandbox %s failed its health check: %s", sbx.name, exc)
                sbx.state = "error"
                self._destroy(sbx)

    # ---- refill ---------------------------------------------------------------------------

    def _deficit(self) -> str | None:
        with self._lock:
            for t, target in self.targets.items():
                if len(self._warm[t]) + self._creating[t] < target:
                    self._creating[t] += 1
                    return t
        return None

    def _refill_loop(self) -> None:
        while not self._stop.is_set():
            sandbox_type = self._deficit()
            if sandbox_type is None:
                self._wake.wait()
                self._wake.clear()
                continue
            ok = self._refill_one(sandbox_type)
            if not ok:
                self._stop.wait(REFILL_RETRY_S)

    def _refill_one(self, sandbox_type: str) -> bool:
        try:
            sbx = self.backend_for(sandbox_type).create(sandbox_type, DEFAULT_QUOTAS)
        except SandgridError as exc:
            log.error("cannot warm a %s sandbox: %s", sandbox_type, exc)
            return False
        finally:
            with self._lock:
                self._creating[sandbox_type] -= 1
        with self._lock:
            if not self._stop.is_set():
                sbx.state = "warm"
                self._warm[sandbox_type].append(sbx)
                return True
        self._destroy(sbx)
        return True

    def _destroy(self, sbx: Sandbox) -> None:
        try:
            self.backend_for(sbx.sandbox_type).destroy(sbx)
        except Exception:
            log.exception("destroying sandbox %s failed", sbx.name)
