"""The turns of the session registry: slots, the queue of waiters, the alone lock, records.

A session runs up to ``quotas.max_parallel_turns`` turns at once: each holds a
member of the session's sorted set of turns in flight (turn id -> deadline),
taken with the tenant's slot and the queue-depth check in one script
(``lua/admit_turn.lua``). A call that finds no slot keeps its place in the
session's queue of waiters (ticket -> arrival) and asks again; one that stops
asking for ``STALE_WAITER_S`` is dropped, so a dead API process blocks nobody.
An op that needs the session alone (pause, restore, checkpoint, close) takes
its alone lock once no turn is in flight (``lua/begin_turn.lua``), waiting in
the same queue. Every key is scored by a deadline or has a TTL, so nothing is
leaked by a process that dies holding it. A tenant's set of turns in flight keeps
its own expiry as a member (``~expiry``, a negative score: no slot), so its TTL
moves once per ``TENANT_SLOTS_BUCKET_S``, not at every turn (issue 22.1).

``SessionTurns`` is the half of ``scheduler.registry.sessions.SessionRegistry``
that does this; it needs the registry's ``redis`` client and ``scripts``.
"""

from __future__ import annotations

import builtins
import time

import redis

from sandgrid.wire import names
from sandgrid.wire.redis_ledger import millis
from sandgrid.wire.scripts import LuaScripts

__all__ = ["STALE_WAITER_S", "TENANT_SLOTS_BUCKET_S", "TURN_RECORD_TTL_S", "SessionTurns"]

#: How long a turn record outlives its lock: long enough to refuse a late redelivery.
TURN_RECORD_TTL_S = 3 * 3600.0
#: A waiting caller that has not asked again for this long is dropped from the
#: session's queue of waiters (its API process died); waiters ask every 100 ms at most.
STALE_WAITER_S = 2.0
#: A tenant's set of turns in flight lives to the end of the bucket of this many seconds
#: that its latest deadline falls in: its TTL moves once a bucket, not at every turn
#: (``lua/admit_turn.lua``; issue 22.1), and it outlives its last turn by this much at most.
TENANT_SLOTS_BUCKET_S = 300


def _waiting_keys(session_id: str) -> tuple[str, str]:
    return names.session_waiting_key(session_id), names.session_seen_key(session_id)


def _tenant_expiry(now: float, deadline: float) -> tuple[int, int]:
    """The score of the tenant set's ``~expiry`` for a turn due at ``deadline`` (minus the
    end of its bucket, in s: no deadline's score), and the ms from ``now`` until then."""
    end = (int(deadline) // TENANT_SLOTS_BUCKET_S + 1) * TENANT_SLOTS_BUCKET_S
    return -end, millis(end - now)


class SessionTurns:
    """The turns' operations on the registry's Redis (see the module doc)."""

    redis: redis.Redis[str]
    scripts: LuaScripts

    def begin_turn(self, session_id: str, turn_id: str, ttl: float) -> bool:
        """Take the session alone for ``ttl`` seconds (an op that needs no turn beside
        it: close, fork, pause, restore, checkpoint) and record the op queued.

        Returns:
            False when the caller must wait: turns are in flight, the session is
            held alone, or an earlier caller waits (this one keeps its place in
            the session's queue of waiters; ``withdraw`` gives it up).
        """
        keys = [
            names.turnlock_key(session_id),
            names.turn_key(turn_id),
            names.session_turns_key(session_id),
            *_waiting_keys(session_id),
        ]
        args = [
            turn_id,
            millis(ttl),
            session_id,
            time.time(),
            millis(ttl + TURN_RECORD_TTL_S),
            STALE_WAITER_S,
        ]
        return bool(self.scripts.run("begin_turn", keys, args))

    def end_turn(self, session_id: str, turn_id: str) -> bool:
        """Give back the turn's session slot, or the session if it held it alone;
        mark the turn done."""
        keys = [
            names.turnlock_key(session_id),
            names.turn_key(turn_id),
            names.session_turns_key(session_id),
        ]
        return bool(self.scripts.run("end_turn", keys, [turn_id]))

    def withdraw(self, session_id: str, ticket: str) -> None:
        """A waiting caller gives up its place in the session's queue of waiters."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(names.session_waiting_key(session_id), ticket)
        pipe.zrem(names.session_seen_key(session_id), ticket)
        pipe.execute()

    def session_turns(self, session_id: str) -> builtins.list[str]:
        """The session's turns in flight (not past their deadline), oldest first."""
        key = names.session_turns_key(session_id)
        found: builtins.list[str] = self.redis.zrangebyscore(key, time.time(), "+inf")
        return found

    def cancel_turn(self, turn_id: str, flag_ttl_s: int) -> None:
        """Mark the turn cancelled, on its record and in its flag (``lua/cancel_turn.lua``)."""
        keys = [names.turn_key(turn_id), names.turn_cancel_key(turn_id)]
        self.scripts.run("cancel_turn", keys, [flag_ttl_s])

    def abandon_turn(self, turn_id: str) -> bool:
        """API side: nobody waits for this turn any more; a late claim is refused."""
        return bool(self.scripts.run("set_turn_state", [names.turn_key(turn_id)], ["abandoned"]))

    def reclaim_turn(
        self, turn_id: str, attempt: int, refuser: str, holder_node: str, holder_inc: str
    ) -> bool:
        """API side: attempt ``attempt``, claimed by ``refuser`` and refused there
        (the session's lease is the earlier holder's), is the earlier holder's again
        (``lua/reclaim_turn.lua``; issue 22.5).

        Returns:
            True when taken back; False when the record moved on, or no earlier
            attempt was ever claimed (the refusal is the turn's answer).
        """
        args = [attempt, refuser, holder_node, holder_inc]
        return bool(self.scripts.run("reclaim_turn", [names.turn_key(turn_id)], args))

    def turn_state(self, turn_id: str) -> dict[str, str]:
        """The turn record: ``state`` (queued, running, done, abandoned), ``node``..."""
        record: dict[str, str] = self.redis.hgetall(names.turn_key(turn_id))
        return record

    def acquire_turn_slot(self, tenant: str, turn_id: str, limit: int, ttl: float) -> bool:
        """Take one of ``limit`` in-flight turn slots of ``tenant`` for ``ttl`` seconds."""
        now = time.time()
        args = [turn_id, limit, now, now + ttl, millis(ttl)]
        return bool(self.scripts.run("turn_slot", [names.tenant_turns_key(tenant)], args))

    def admit_turn(
        self,
        queue: str,
        depth_limit: int,
        tenant: str,
        limit: int,
        session_id: str,
        turn_id: str,
        ttl: float,
        *,
        parallel: int = 1,
        shared: bool = False,
        check_depth: bool = True,
    ) -> tuple[str, int]:
        """``acquire_turn_slot`` and a slot among the session's ``parallel`` turns in
        flight, behind a queue-depth check, in one round trip
        (``lua/admit_turn.lua``): all taken, or none.

        ``shared``: the turn goes to its type's shared queue (no live owner); it
        waits while another turn is in flight, which is bringing the session to
        a worker, so that all of them run where that one restored it.
        ``check_depth`` False: the caller knows the queue is shallow (its own last
        push to it said so), and its length is not read.

        Returns:
            ``("ok", 0)``, ``("backpressure", depth)``, ``("tenant_limit", 0)`` or
            ``("wait", running)``: the first check that refused, in that order.
            A caller told to wait keeps its place in the session's queue of
            waiters until it is admitted or ``withdraw``s.
        """
        now = time.time()
        keys = [
            queue,
            names.tenant_turns_key(tenant),
            names.session_turns_key(session_id),
            names.turn_key(turn_id),
            names.turnlock_key(session_id),
            *_waiting_keys(session_id),
        ]
        args = [
            turn_id,
            depth_limit if check_depth else "",
            limit,
            now,
            now + ttl,
            millis(ttl),
            session_id,
            millis(ttl + TURN_RECORD_TTL_S),
            STALE_WAITER_S,
            parallel,
            "1" if shared else "0",
            *_tenant_expiry(now, now + ttl),
        ]
        found = self.scripts.run("admit_turn", keys, args)
        return str(found[0]), int(found[1]) if len(found) > 1 else 0

    def finish_turn(
        self,
        session_id: str,
        turn_id: str,
        tenant: str,
        *,
        result_key: str | None = None,
        settled: str = "",
        keep_s: float = 0.0,
        alone: bool = False,
    ) -> None:
        """``end_turn`` and ``release_turn_slot`` of a turn that answered, in one round
        trip (``lua/finish_turn.lua``), with the other writes of its end: delete its
        Celery result at ``result_key`` (read already), and keep ``settled`` (the
        record of a keyed exec's outcome: ``scheduler.turns.idempotency.done_record``)
        under the turn's idempotency key for ``keep_s``.
        ``alone``: the turn held the session alone (``begin_turn``), so its alone
        lock is released; a turn in a slot never holds it, and skips reading it."""
        keys = [
            names.turnlock_key(session_id),
            names.turn_key(turn_id),
            names.tenant_turns_key(tenant),
            result_key or names.turn_key(turn_id),
            names.idempotency_key(turn_id),
            names.session_turns_key(session_id),
        ]
        args = [
            turn_id,
            "1" if result_key else "0",
            settled,
            max(1, int(keep_s)),
            "1" if alone else "0",
        ]
        self.scripts.run("finish_turn", keys, args)

    def release_turn_slot(self, tenant: str, turn_id: str) -> None:
        """Give back the slot of a finished turn."""
        self.redis.zrem(names.tenant_turns_key(tenant), turn_id)

    def turns_in_flight(self, tenant: str) -> int:
        """The tenant's turns in flight (slots not past their deadline)."""
        key = names.tenant_turns_key(tenant)
        return int(self.redis.zcount(key, time.time(), "+inf"))
