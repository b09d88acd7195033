"""Wait for a turn's outcome, watching who holds it, and send it again when it is lost.

The runner sends a turn and hands its handle here. ``TurnWaiting.wait`` polls the
dispatcher every ``lost_check_s`` and between polls asks ``TurnWatch`` whether
the process that holds the turn still lives. When it is gone,
``TurnRecovery`` decides: a next attempt is sent (to the session's owner if it
lives, else to its type's queue) and waited for the same way; when the process
taken for lost refuses that attempt with its lease (it only looked dead: a
Redis failover outlasted its heartbeat), the earlier attempt's result is
waited for again (``TurnRecovery.on_refused``, issue 22.5). Past ``ttl`` the
turn's timeout is ``recovery``'s to answer.

One ``TurnWaiting`` serves one turn: the runner makes it from its parts at the
turn's start, so a part swapped on the runner (a test's dispatcher) is the one used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sandgrid.errors import InfrastructureError
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.registry.nodes import NodeDirectory
from scheduler.registry.sessions import SessionRegistry
from scheduler.turns.dispatch import Dispatcher
from scheduler.turns.recovery import Earlier, TurnRecovery, timeout_of
from scheduler.turns.routing import route
from scheduler.turns.watch import Lost, TurnWatch

__all__ = ["TurnWaiting"]


@dataclass(frozen=True)
class TurnWaiting:
    """The wait of one turn (see the module doc).

    Attributes:
        registry: the session registry (turn records, routes).
        nodes: the live nodes, for ``TurnWatch``.
        dispatcher: sends attempts and waits for outcomes.
        recovery: what becomes of a turn whose holder is lost or whose time is up.
        lost_check_s: how often the holder is checked.
        restart_grace_s: ``scheduler.turns.watch.RESTART_GRACE_S``.
        turn_margin_s: wait beyond a resent attempt's exec deadline.
    """

    registry: SessionRegistry
    nodes: NodeDirectory
    dispatcher: Dispatcher
    recovery: TurnRecovery
    lost_check_s: float
    restart_grace_s: float
    turn_margin_s: float

    def wait(self, job: TurnJob, handle: Any, queue: str, ttl: float) -> TurnOutcome:
        """The outcome of ``job`` sent as ``handle`` to ``queue``, within ``ttl`` s."""
        deadline = time.monotonic() + ttl
        watch = TurnWatch(
            self.registry, self.nodes, job, queue, restart_grace_s=self.restart_grace_s
        )
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.dispatcher.forget(handle)
                self.recovery.on_turn_timeout(job, ttl)
            outcome = self.dispatcher.wait(handle, min(self.lost_check_s, left))
            if outcome is not None:
                return outcome
            lost = watch.check()
            if lost is not None:
                last = self.dispatcher.wait(handle, self.lost_check_s / 10)
                if last is not None:
                    return last
                retry = self._after_lost(job, handle, lost)
                if retry is not None:
                    return self._resend(retry, Earlier(job, handle, queue, lost))

    def _after_lost(self, job: TurnJob, handle: Any, lost: Lost) -> TurnJob | None:
        """Ask ``recovery`` about a turn whose holder is gone (None: a live process
        took it meanwhile, keep waiting for it). The old attempt's result is kept
        while the next one runs: it may be the turn's answer yet (``_resend``)."""
        try:
            return self.recovery.on_worker_lost(job, lost.node, holder=lost.holder)
        except InfrastructureError:
            self.dispatcher.forget(handle)
            raise

    def _resend(self, retry: TurnJob, earlier: Earlier) -> TurnOutcome:
        """Send the next attempt and wait for it like the first; when the holder
        taken for lost refused it with its lease, wait for the earlier attempt again."""
        queue = route(self.registry, retry.session, batch=retry.batch)
        ttl = (timeout_of(retry) or retry.session.quotas.timeout_s) + self.turn_margin_s
        handle = self.dispatcher.send(retry, queue, expires=ttl)
        try:
            outcome = self.wait(retry, handle, queue, ttl)
        except BaseException:
            self.dispatcher.forget(earlier.handle)
            raise
        if not self.recovery.on_refused(retry, outcome, earlier.lost):
            self.dispatcher.forget(earlier.handle)
            return outcome
        self.dispatcher.forget(handle)
        # A fresh handle: its first wait reads the result key, which is the truth
        # (a result stored while nobody listened is there).
        again = self.dispatcher.handle_of(earlier.job)
        return self.wait(retry, again, earlier.queue, ttl)
