"""Close a session: take it alone (its turns cancelled first), mark it closed, and
send the close to whoever can destroy its sandbox and delete its snapshots.

A close cancels the turns in flight and takes the session alone when they end
(``TurnCancels.lock_for_close``); if they do not end in time it answers 409
``session_busy`` and changes nothing. The close goes to the owner's direct
queue (it destroys the sandbox and deletes the snapshots), else to any worker
of the type (it deletes the snapshots), else nowhere when the session never had
a sandbox or a snapshot: a close that no worker handles is caught by the
workers' snapshot collection.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandgrid.errors import Conflict, ErrorCode
from sandgrid.models import SessionInfo
from sandgrid.ops.session import CloseOp
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob
from scheduler.audit.log import AuditLog
from scheduler.expiry import is_due
from scheduler.registry.sessions import SessionRegistry, new_turn_id
from scheduler.tenants import Tenant
from scheduler.turns.cancel import TurnCancels
from scheduler.turns.dispatch import Dispatcher

__all__ = ["CLOSE_EXPIRES_S", "SessionCloser", "closed_error", "refuse_ended"]

#: How long a close message may wait in the owner's queue before it is dropped.
CLOSE_EXPIRES_S = 120.0


@dataclass(frozen=True)
class SessionCloser:
    """Closes sessions (see the module doc); ``lock_s`` bounds the alone lock."""

    registry: SessionRegistry
    cancels: TurnCancels
    dispatcher: Dispatcher
    audit: AuditLog | None
    lock_s: float

    def close(self, tenant: Tenant, session_id: str) -> SessionInfo:
        """Close ``session_id`` of ``tenant``; its record as it is now.

        Raises:
            NotFound: unknown session. Conflict: its turns did not end in time.
        """
        session = self.registry.get(tenant.name, session_id)
        if session.state == "closed":
            return session
        lock = new_turn_id()
        if not self.cancels.lock_for_close(session, lock, self.lock_s):
            raise _busy(session.id, "sessions.close")
        try:
            self.registry.close(session.id)
            if self.audit is not None:
                self.audit.event(tenant.name, session.id, "session_close")
            queue = self._queue(session)
            if queue is not None:
                job = TurnJob(turn_id=new_turn_id(), session=session, op=CloseOp())
                self.dispatcher.send(job, queue, expires=CLOSE_EXPIRES_S)
        finally:
            self.registry.end_turn(session.id, lock)
        return self.registry.get(tenant.name, session_id)

    def _queue(self, session: SessionInfo) -> str | None:
        """Where the close goes (see the module doc)."""
        if session.owner and self.registry.node_alive(session.owner):
            return names.node_queue(session.owner)
        if session.snapshot or session.turns or session.forked_from:
            return names.type_queue(session.type)
        return None


def _busy(session_id: str, operation: str) -> Conflict:
    return Conflict(
        f"session {session_id!r}: its turns did not end in time for {operation}; retry later",
        code=ErrorCode.SESSION_BUSY,
        operation=operation,
        context={"session": session_id},
    )


def closed_error(session_id: str, operation: str) -> Conflict:
    """409 ``session_closed`` for ``operation`` on a closed session (also the fork route's)."""
    return Conflict(
        f"session {session_id!r} is closed",
        code=ErrorCode.SESSION_CLOSED,
        operation=operation,
        context={"session": session_id},
    )


def refuse_ended(session: SessionInfo, operation: str) -> None:
    """Refuse ``operation`` on a closed session, or on one past its TTL (the sweeper,
    ``scheduler.expiry``, closes it).

    Raises:
        Conflict: 409 ``session_closed`` (``expired`` in its context for the latter).
    """
    if session.state == "closed":
        raise closed_error(session.id, operation)
    if is_due(session):
        raise Conflict(
            f"session {session.id!r} has expired (its idle timeout or lifetime)",
            code=ErrorCode.SESSION_CLOSED,
            operation=operation,
            context={"session": session.id, "expired": True},
        )
