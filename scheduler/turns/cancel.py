"""Cancel a turn: flag it in Redis, then tell the worker that runs it.

The mark comes first (``SessionRegistry.cancel_turn``: on the turn record, which
the worker's claim reads, and in the turn's flag, read after a restore), so a
turn that no worker has started yet answers ``cancelled`` without running when
one takes it; then a
``cancel`` task goes to the direct queue of the node that holds the turn (its
turn record names it from the moment the node reserved the message) or, else,
of the session's owner, and that node kills the exec's process tree through
the agent (``worker.turns.interactive``). A turn that has finished is left alone: the
answer says ``finished`` (200, a no-op), so a cancel racing the turn's end is
never an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from sandgrid.errors import NotFound
from sandgrid.models import SessionInfo
from sandgrid.streaming import TurnCancel
from sandgrid.wire import names, turnstream
from scheduler.registry.sessions import SessionRegistry

__all__ = [
    "CANCEL_EXPIRES_S",
    "CLOSE_CANCEL_WAIT_S",
    "CancelSender",
    "TurnCancels",
    "celery_sender",
]

log = logging.getLogger(__name__)

#: A cancel task older than this is dropped by the worker (the turn is long gone).
CANCEL_EXPIRES_S = 30.0

#: How long a close waits for the turn it cancelled to end before answering 409.
CLOSE_CANCEL_WAIT_S = 10.0

CancelSender = Callable[[str, str], None]
"""Sends ``cancel(turn_id)`` to a queue: ``send(queue, turn_id)``."""


def celery_sender(app: Celery | None) -> CancelSender:
    """The sender over a Celery app; without one (a test's fake dispatcher) only the flag
    stops a turn, before it starts."""

    def send(queue: str, turn_id: str) -> None:
        if app is not None:
            app.send_task(names.TASK_CANCEL, args=[turn_id], queue=queue, expires=CANCEL_EXPIRES_S)

    return send


class TurnCancels:
    """Cancels turns by id for the API and for a close during a turn.

    Args:
        registry: the session registry (turn records, owners).
        send: how a cancel reaches a node's direct queue.
    """

    def __init__(self, registry: SessionRegistry, send: CancelSender) -> None:
        self.registry = registry
        self.send = send

    def cancel(self, session: SessionInfo, turn_id: str) -> TurnCancel:
        """Cancel ``turn_id`` of ``session``.

        Raises:
            NotFound: the turn is another session's.
        """
        redis: Any = self.registry.redis
        record = self.registry.turn_state(turn_id)
        if record.get("session", session.id) != session.id:
            raise NotFound(
                f"turn {turn_id!r} is not a turn of session {session.id!r}",
                operation="turns.cancel",
                context={"turn": turn_id, "session": session.id},
            )
        if record.get("state") in ("done", "abandoned") or turnstream.finished(redis, turn_id):
            return TurnCancel(turn_id=turn_id, state="finished")
        self.registry.cancel_turn(turn_id, turnstream.CANCEL_TTL_S)
        node = record.get("node") or session.owner
        if node:
            try:
                self.send(names.node_queue(node), turn_id)
            except Exception:  # the flag still stops it before it starts
                log.exception("turn %s: could not send the cancel to %s", turn_id, node)
        return TurnCancel(turn_id=turn_id, state="cancelling")

    def running(self, session_id: str) -> list[str]:
        """The session's turns in flight, and the op holding it alone, if any."""
        holder = self.registry.redis.get(names.turnlock_key(session_id))
        turns = self.registry.session_turns(session_id)
        return [*turns, str(holder)] if holder else turns

    def lock_for_close(self, session: SessionInfo, lock: str, ttl: float) -> bool:
        """Take the session alone to close it; the turns in flight are cancelled
        first and the session taken when they end (False if they do not end in
        time). The calls waiting for a slot wait behind the close, then find the
        session closed."""
        if self.registry.begin_turn(session.id, lock, ttl):
            return True
        for turn_id in self.running(session.id):
            self.cancel(session, turn_id)
        deadline = time.monotonic() + CLOSE_CANCEL_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if self.registry.begin_turn(session.id, lock, ttl):
                return True
        self.registry.withdraw(session.id, lock)
        return False
