"""A terminal turn on the control plane: send it like any turn, but never block on it.

A terminal lasts as long as its user types, so the API must not hold a thread
for it. ``open_terminal`` does the quick, synchronous part of ``TurnRunner.run``
(checks, routing, the tenant's slot, the session's turn lock, the send) and
returns a ``TerminalTurn``; the WebSocket route then pumps the turn's Redis
Streams with the async client, and learns the turn's end from the stream's
exit entry or, when the worker failed before it started the shell, from the
turn's stored Celery result (``result_key``). ``TerminalTurn.finish`` releases
the lock and the slot.

The turn lock and the slot are held with a TTL of the terminal's ``max_s``
plus the turn margin, so an API process that dies mid-terminal leaks neither.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sandgrid.errors import Conflict, ErrorCode, InvalidInput, SandgridError, error_from_body
from sandgrid.models import SessionInfo
from sandgrid.ops.terminal import PtyOp
from sandgrid.wire.jobs import TurnJob
from scheduler.registry.sessions import new_turn_id
from scheduler.tenants import Tenant
from scheduler.turns.dispatch import task_id_of
from scheduler.turns.runner import TurnRunner

__all__ = ["TerminalTurn", "open_terminal", "outcome_error", "pty_op"]


def pty_op(pty_id: str, params: dict[str, Any]) -> PtyOp:
    """The op of a terminal from the socket's query parameters.

    Raises:
        InvalidInput: a parameter breaks its rule (named in ``context.field``).
    """
    try:
        return PtyOp.model_validate({**params, "pty_id": pty_id})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(
            f"{field}: {err['msg']}",
            operation="pty",
            context={"field": field, "rule": err["msg"]},
        ) from None


@dataclass
class TerminalTurn:
    """A terminal turn that was sent: what the route needs to serve and end it."""

    runner: TurnRunner
    tenant: Tenant
    session: SessionInfo
    job: TurnJob
    handle: Any
    result_key: str | None
    """The Redis key of the turn's Celery result (None: a dispatcher without one)."""
    opened: float = field(default_factory=time.monotonic)

    @property
    def op(self) -> PtyOp:
        assert isinstance(self.job.op, PtyOp)
        return self.job.op

    def finish(self) -> None:
        """Release the session's turn lock and the tenant's slot; forget the result."""
        try:
            self.runner.dispatcher.forget(self.handle)
        finally:
            self.runner.registry.end_turn(self.session.id, self.job.turn_id)
            self.runner.admission.release_turn(self.tenant, self.job.turn_id)
            if self.runner.audit is not None:
                self.runner.audit.terminal(self.job, opened_s=time.monotonic() - self.opened)


def open_terminal(
    runner: TurnRunner, tenant: Tenant, session_id: str, params: dict[str, Any]
) -> TerminalTurn:
    """Check and send a terminal turn of ``session_id``; quick (no waiting on the worker).

    Raises:
        NotFound: unknown session (or another tenant's).
        InvalidInput: a bad terminal parameter.
        Conflict: the session is closed, or busy with another turn.
        LimitExceeded: backpressure, or the tenant's turns in flight.
    """
    session = runner.registry.get(tenant.name, session_id)
    turn_id = new_turn_id()
    op = pty_op(turn_id, params)
    if session.state == "closed":
        raise Conflict(
            f"session {session.id!r} is closed",
            code=ErrorCode.SESSION_CLOSED,
            operation="pty",
            context={"session": session.id},
        )
    ttl = op.max_s + runner.turn_margin_s
    runner.admission.check_capacity(session.type, "pty")
    admitted = runner.slots.enter(tenant, session, "pty", turn_id, ttl)  # one of its slots
    job = TurnJob(turn_id=turn_id, session=admitted.session, op=op)
    try:
        handle = runner.dispatcher.send(job, admitted.queue, expires=ttl)
    except BaseException:
        runner.registry.end_turn(session.id, turn_id)
        runner.admission.release_turn(tenant, turn_id)
        raise
    if runner.audit is not None:
        runner.audit.terminal(job)
    return TerminalTurn(runner, tenant, session, job, handle, _result_key(runner, job))


def _result_key(runner: TurnRunner, job: TurnJob) -> str | None:
    app = getattr(runner.dispatcher, "app", None)
    if app is None:
        return None
    key = app.backend.get_key_for_task(task_id_of(job))
    return key.decode() if isinstance(key, bytes) else str(key)


def outcome_error(raw: str) -> SandgridError | None:
    """The error of a stored Celery result of a turn; None when the turn succeeded."""
    try:
        meta = json.loads(raw)
    except ValueError:
        return SandgridError("the terminal turn's result is unreadable")
    result = meta.get("result") if isinstance(meta, dict) else None
    if isinstance(result, dict) and result.get("ok") is True:
        return None
    if isinstance(result, dict) and isinstance(result.get("error"), dict):
        return error_from_body(result["error"])
    return SandgridError(f"the terminal turn failed in the worker: {str(result)[:200]}")
