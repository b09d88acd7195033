"""Idempotent exec: a retried exec with the same key runs once and answers the same.

The client sends an ``Idempotency-Key`` header with an exec (the SDK makes one
per call and reuses it across its retries). The turn id is derived from
(tenant, session, key), so every copy of the request names the same turn, and
the turn's own dedupe holds across API processes and worker deaths: the turn
record (``claim_turn`` refuses a second run of one turn) and the Celery task id
(``turn_id.attempt``). Beside it, this module keeps one small record per key:

    sg:idem:<turn id>   a string: "<state>\\n<fp>\\n<rest>", state pending (rest: when
                        it was reserved, ms) or done (rest: the TurnOutcome JSON); fp
                        the request's fingerprint

  A string, not a hash (issue 22.1): ``SET ... NX PX ... GET`` reserves the key and
  reads what it held in one command, and the end of the turn keeps the outcome with
  one ``SET ... EX`` (``lua/finish_turn.lua``). A hash left by an earlier version is
  still read (``_legacy``), never taken over, and lapses with its TTL.

- ``reserve`` (that one SET: only the holder of a reservation writes the turn
  record, and a reservation outlives any turn record its holder writes, so a
  key that holds nothing has no turn record: issue 22.1, the turn record's
  ``EXISTS`` beside it is gone) either reserves the key (``new``: run the turn),
  or finds it ``pending`` (a request with the key is in flight, or its turn was
  sent: wait for the same outcome), ``done`` (answer the stored outcome, never
  run again), or ``mismatch`` (the key was used for a different request: 422).
- A pending reservation lives as long as its turn's record may (deadline +
  margin + ``TURN_RECORD_TTL_S``), so that the key of an API process that died
  is not held forever, and never lapses before that record: a later retry
  waits for that turn's result, never runs it again. A reservation whose
  request died before it sent the turn (no turn record ``TAKE_OVER_S`` after it
  was made) is taken over by one waiting retry, which runs the turn. A request
  that died after the turn record was written but before the message was sent
  leaves its retries waiting until the turn's deadline (503 ``turn_timeout``):
  a window of microseconds.
- An outcome is kept ``IDEMPOTENCY_TTL_S`` (a day) after the turn finished:
  within that window a retry gets it; after it, the key is forgotten.
- A request refused before its turn could run (busy, limits, a retryable grid
  error) releases the key, so the same key can run it later.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

import redis
from pydantic import ValidationError

from sandgrid.errors import (
    ErrorCode,
    InvalidInput,
    SandboxError,
    SandgridError,
)
from sandgrid.models import IDEMPOTENCY_HEADER
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOp, TurnOutcome
from sandgrid.wire.redis_ledger import millis
from scheduler.registry import lua_source
from scheduler.registry.sessions import SessionRegistry
from scheduler.registry.turns import TURN_RECORD_TTL_S
from scheduler.turns.dispatch import Dispatcher
from scheduler.turns.recovery import TurnRecovery, refused_by_lease

__all__ = [
    "DONE",
    "IDEMPOTENCY_TTL_S",
    "NOT_RUN_CODES",
    "TAKE_OVER_S",
    "IdempotencyStore",
    "Reservation",
    "TakeOver",
    "check_key",
    "done_record",
    "fingerprint",
    "turn_id_for",
]

#: How long the outcome of a finished turn is kept under its key (s).
IDEMPOTENCY_TTL_S = 86400.0
#: After how long a reservation without a turn record may be taken over (s).
TAKE_OVER_S = 5.0
_KEY = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")
#: The state of a key whose turn ended: its outcome is kept.
DONE = "done"

#: Errors that prove a keyed exec's turn did not run: its key is released, so a
#: retry with it may run the turn (any other error is kept under the key).
NOT_RUN_CODES = frozenset(
    {
        ErrorCode.SESSION_BUSY,
        ErrorCode.SESSION_CLOSED,
        ErrorCode.NOT_FOUND,
        ErrorCode.TENANT_LIMIT,
        ErrorCode.BACKPRESSURE,
        ErrorCode.INVALID_INPUT,
        ErrorCode.PATH_OUTSIDE_WORKSPACE,
        ErrorCode.NO_CAPACITY,
        ErrorCode.STORE_UNAVAILABLE,  # the restore before the op (after it: a result)
    }
)


def check_key(key: str) -> str:
    """The key if it is well formed.

    Raises:
        InvalidInput: 422 naming the header, with the rule.
    """
    if not _KEY.match(key):
        rule = "8 to 128 characters of A-Z a-z 0-9 . _ : - (a UUID will do)"
        raise InvalidInput(
            f"{IDEMPOTENCY_HEADER}: {rule}",
            operation="exec",
            context={"field": IDEMPOTENCY_HEADER, "in": "header", "rule": rule},
        )
    return key


def turn_id_for(tenant: str, session_id: str, key: str) -> str:
    """The turn id of an exec with ``key``: the same for every retry, unguessable
    from another tenant's or session's key."""
    digest = hashlib.sha256(f"{tenant}\x00{session_id}\x00{key}".encode()).hexdigest()
    return "t-k" + digest[:32]


def fingerprint(op: TurnOp) -> str:
    """A hash of what the request asks for: a key reused for another request differs."""
    body = json.dumps(op.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class Reservation:
    """What ``reserve`` found: run the turn, wait for it, replay it, or refuse."""

    state: Literal["new", "pending", "done", "mismatch"]
    outcome: TurnOutcome | None = None


class TakeOver(Exception):
    """``attach`` found the reservation abandoned before its turn was sent, and
    took it over: the caller runs the turn."""


class IdempotencyStore:
    """The records of idempotency keys, in the registry's Redis.

    Args:
        client: a Redis client created with ``decode_responses=True``.
        ttl_s: how long a finished turn's outcome is kept.
        take_over_s: after how long a reservation without a turn record may be
            taken over by a retry.
    """

    def __init__(
        self,
        client: redis.Redis[str],
        *,
        ttl_s: float = IDEMPOTENCY_TTL_S,
        take_over_s: float = TAKE_OVER_S,
    ) -> None:
        self.redis = client
        self.ttl_s = ttl_s
        self.take_over_s = take_over_s
        self._take_over_script = client.register_script(lua_source("take_over_idempotency"))

    def reserve(self, turn_id: str, fp: str, pending_s: float) -> Reservation:
        """Reserve the key of ``turn_id`` for a turn of ``pending_s`` seconds (and the
        life of its record after it: ``_pending_ms``), or say what it holds."""
        key = names.idempotency_key(turn_id)
        record = _record("pending", fp, str(millis(time.time())))
        try:
            # with GET, SET answers the value it found (the stubs say bool)
            held: Any = self.redis.set(key, record, nx=True, get=True, px=_pending_ms(pending_s))
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            return self._legacy(turn_id, fp)
        if held is None:
            return Reservation("new")
        state, held_fp, rest = _parse(held)
        if held_fp != fp:
            return Reservation("mismatch")
        if state == DONE:
            return Reservation("done", _stored(turn_id, rest))
        return Reservation("pending")

    def _legacy(self, turn_id: str, fp: str) -> Reservation:
        """What a key's hash record of an earlier version holds (never reserved anew)."""
        old = self.redis.hgetall(names.idempotency_key(turn_id))
        if not old:
            return Reservation("pending")  # lapsed meanwhile: the next look reserves it
        if old.get("fp") != fp:
            return Reservation("mismatch")
        if old.get("state") == DONE and old.get("outcome"):
            return Reservation("done", _stored(turn_id, old["outcome"]))
        return Reservation("pending")

    def mismatch(self, key: str) -> InvalidInput:
        """The 422 of a key reused with a different request."""
        return InvalidInput(
            f"{IDEMPOTENCY_HEADER}: the key {key!r} was used for a different request to this "
            "session; a retry must send the same body, a new request a new key",
            code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
            operation="exec",
            context={
                "field": IDEMPOTENCY_HEADER,
                "in": "header",
                "rule": "one key, one request body",
            },
        )

    def settle(self, turn_id: str, fp: str, outcome: TurnOutcome) -> None:
        """Keep the turn's outcome under its key for ``ttl_s``."""
        value = done_record(fp, outcome.model_dump_json())
        self.redis.set(names.idempotency_key(turn_id), value, ex=int(self.ttl_s))

    def outcome(self, turn_id: str) -> TurnOutcome | None:
        """The stored outcome of a finished turn, if any."""
        key = names.idempotency_key(turn_id)
        try:
            raw = self.redis.get(key)
        except redis.ResponseError:  # an earlier version's hash
            legacy = self.redis.hget(key, "outcome")
            return _stored(turn_id, legacy) if legacy else None
        if raw is None:
            return None
        state, _, rest = _parse(raw)
        return _stored(turn_id, rest) if state == DONE else None

    def failed(self, turn_id: str, fp: str, exc: SandgridError) -> None:
        """A keyed turn ended in ``exc``: release the key when the turn did not run,
        keep the error under it otherwise. With the registry down, neither: the
        reservation lapses and a retry waits for the turn (it may have been sent)."""
        if exc.code in NOT_RUN_CODES or exc.context.get("turn_sent") is False:
            self.release(turn_id)
        elif exc.code != ErrorCode.REGISTRY_UNAVAILABLE:
            error = exc.to_body()["error"]
            outcome = TurnOutcome(turn_id=turn_id, node="", ok=False, error=error)
            self.settle(turn_id, fp, outcome)

    def attach(
        self,
        dispatcher: Dispatcher,
        registry: SessionRegistry,
        job: TurnJob,
        ttl: float,
        poll_s: float,
    ) -> TurnOutcome:
        """Wait for the outcome of a keyed turn that another request sent: the one
        stored under the key, or the turn's Celery result (its sender may be gone).
        It never sends the turn: the request that holds the reservation does.

        Raises:
            TakeOver: the reservation was released (the turn did not run) or its
                request died before sending the turn; this caller now holds it.
            InvalidInput: the released key was taken by a different request.
            InfrastructureError: ``turn_timeout``, no outcome within ``ttl`` (the
                turn is abandoned; ``ran: false`` when no worker ever claimed it).
        """
        fp, pending_s = fingerprint(job.op), ttl + self.take_over_s
        deadline = time.monotonic() + ttl
        while (left := deadline - time.monotonic()) > 0:
            found = self.reserve(job.turn_id, fp, pending_s)
            if found.outcome is not None:
                return found.outcome
            if found.state == "mismatch":
                raise self.mismatch("")
            if found.state == "new" or self._take_over(job.turn_id, ttl):
                raise TakeOver(job.turn_id)
            attempt = int(registry.turn_state(job.turn_id).get("attempt") or 1)
            handle = dispatcher.handle_of(job.model_copy(update={"attempt": attempt}))
            outcome = dispatcher.wait(handle, min(poll_s, left))
            # A resend refused by a lease may not be the answer: its sender decides
            # (``TurnRecovery.on_refused``) and keeps the answer under the key.
            if outcome is not None and not (attempt > 1 and refused_by_lease(outcome)):
                self.settle(job.turn_id, fp, outcome)
                return outcome
        # As the sender's own wait ends (22.5: a task message lost with a Redis primary
        # killed as it was sent left a retry silent on whether its turn ran): the turn
        # is abandoned, so the answer can say it did not run when no worker took it.
        TurnRecovery(registry).on_turn_timeout(job, ttl)

    def _take_over(self, turn_id: str, ttl: float) -> bool:
        keys = [names.idempotency_key(turn_id), names.turn_key(turn_id)]
        grace = self.take_over_s
        args = [millis(time.time()), millis(grace), _pending_ms(ttl + grace)]
        return bool(self._take_over_script(keys=keys, args=args))

    def release(self, turn_id: str) -> None:
        """Forget a key whose turn did not run, with its turn record: the same key
        may run it later. Only for a turn that was refused or never sent."""
        self.redis.delete(names.idempotency_key(turn_id), names.turn_key(turn_id))


def _pending_ms(turn_s: float) -> int:
    """How long a reservation for a turn of ``turn_s`` seconds lives: beyond the turn's
    record (written after it, for ``turn_s + TURN_RECORD_TTL_S`` at most), so that a
    key that holds nothing never has a turn record (``reserve``)."""
    return millis(turn_s + TURN_RECORD_TTL_S)


def _record(state: str, fp: str, rest: str) -> str:
    """A key's record: its state, the request's fingerprint, and the state's datum."""
    return f"{state}\n{fp}\n{rest}"


def done_record(fp: str, outcome_json: str) -> str:
    """The record of a key whose turn ended in ``outcome_json`` (the turn's end writes
    it: ``SessionRegistry.finish_turn``)."""
    return _record(DONE, fp, outcome_json)


def _parse(raw: str) -> tuple[str, str, str]:
    """A record's state, fingerprint and datum (a record cut short reads as pending)."""
    state, _, tail = raw.partition("\n")
    fp, _, rest = tail.partition("\n")
    return state, fp, rest


def _stored(turn_id: str, raw: str) -> TurnOutcome:
    """The outcome kept under a key, validated (its result typed) as it enters.

    Raises:
        SandboxError: it does not fit this version's ``TurnOutcome`` (kept by
            another version of the grid).
    """
    try:
        return TurnOutcome.model_validate_json(raw)
    except ValidationError as exc:
        raise SandboxError(
            f"the outcome kept for turn {turn_id} does not fit: {exc.errors()[0]['msg']}",
            operation="exec",
            context={"turn": turn_id},
        ) from None
