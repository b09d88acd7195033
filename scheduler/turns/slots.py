"""A turn's place in its session: one of its parallel slots, or the session alone.

A session runs up to ``quotas.max_parallel_turns`` turns at once, as commands
in one container do. A call that finds every slot taken waits for one, in the
order the calls came (the session's queue of waiters, in Redis, so every API
process serves one order), for at most ``wait_s``; then it is refused with 429
``session_busy`` and a ``retry_after``, never 409. Ops that need the session
alone (``EXCLUSIVE_KINDS``: pause, restore, checkpoint; close, in
``TurnCancels.lock_for_close``) wait in the same queue for the running turns
to end, and the turns that come after them wait behind them.

When the session has no live owner, its first turn goes to the shared queue of
its type and brings the session to whichever worker takes it; the turns that
come meanwhile wait until that worker holds the session's lease, then go to
its direct queue, so that one restore serves them all (``route`` is asked
again at each look).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sandgrid.errors import ErrorCode, LimitExceeded
from sandgrid.models import SessionInfo
from sandgrid.wire import names
from scheduler import metrics
from scheduler.registry.sessions import SessionRegistry
from scheduler.tenants import Tenant
from scheduler.turns.admission import Admission
from scheduler.turns.routing import CachedLiveness, route

__all__ = ["EXCLUSIVE_KINDS", "FIRST_LOOK_S", "LAST_LOOK_S", "Admitted", "SessionSlots"]

#: The ops that need the session with no turn beside them.
EXCLUSIVE_KINDS = frozenset({"pause", "restore", "checkpoint"})
#: The first pause between two looks at a full session, doubled up to ``LAST_LOOK_S``.
FIRST_LOOK_S = 0.005
LAST_LOOK_S = 0.1


@dataclass(frozen=True)
class Admitted:
    """Where an admitted turn goes, and its session as the registry had it then."""

    queue: str
    session: SessionInfo


class SessionSlots:
    """Takes a turn's slot in its session, waiting in order when there is none.

    Args:
        registry: the session registry (slots, waiters and the alone lock).
        admission: the queue-depth and tenant checks taken with the slot.
        wait_s: how long a call waits for a slot before 429 ``session_busy``.
    """

    def __init__(self, registry: SessionRegistry, admission: Admission, wait_s: float) -> None:
        self.registry = registry
        self.admission = admission
        self.wait_s = wait_s
        self.liveness = CachedLiveness(admission.nodes, registry)

    def enter(
        self,
        tenant: Tenant,
        session: SessionInfo,
        kind: str,
        turn_id: str,
        ttl: float,
        *,
        batch: bool = False,
    ) -> Admitted:
        """A slot for turn ``turn_id`` (the session alone for an exclusive ``kind``).

        Raises:
            LimitExceeded: ``backpressure`` or ``tenant_limit`` (at once), or
                ``session_busy`` when no slot came within ``wait_s``.
        """
        deadline = time.monotonic() + self.wait_s
        pause = FIRST_LOOK_S
        while True:
            queue = route(self.liveness, session, batch=batch)
            try:
                taken = self._take(tenant, session, kind, queue, turn_id, ttl)
            except BaseException:
                self.registry.withdraw(session.id, turn_id)
                raise
            if taken:
                return Admitted(queue, session)
            if time.monotonic() + pause > deadline:
                self.registry.withdraw(session.id, turn_id)
                raise self._busy(session, kind)
            time.sleep(pause)
            pause = min(pause * 2, LAST_LOOK_S)
            session = self.registry.get_any(session.id) or session  # its owner, its snapshot

    def _take(
        self, tenant: Tenant, session: SessionInfo, kind: str, queue: str, turn_id: str, ttl: float
    ) -> bool:
        if kind not in EXCLUSIVE_KINDS:
            shared = queue != names.node_queue(session.owner or "")
            parallel = session.quotas.max_parallel_turns
            return self.admission.admit(
                tenant, queue, session.id, turn_id, ttl, parallel=parallel, shared=shared
            )
        self.admission.check_queue(queue)
        if not self.registry.begin_turn(session.id, turn_id, ttl):
            return False
        try:
            self.admission.acquire_turn(tenant, turn_id, ttl)
        except BaseException:
            self.registry.end_turn(session.id, turn_id)
            raise
        return True

    def _busy(self, session: SessionInfo, kind: str) -> LimitExceeded:
        metrics.reject("session_busy")
        limit = session.quotas.max_parallel_turns
        alone = kind in EXCLUSIVE_KINDS
        why = (
            "it needs the session with no turn running"
            if alone
            else f"the session runs {limit} turns at once (quotas.max_parallel_turns)"
        )
        return LimitExceeded(
            f"session {session.id!r}: no slot within {self.wait_s:g}s; {why}: retry later",
            code=ErrorCode.SESSION_BUSY,
            operation=kind,
            context={
                "session": session.id,
                "limit": "quotas.max_parallel_turns",
                "max": limit,
                "waited_s": self.wait_s,
            },
            retry_after=1.0,
        )
