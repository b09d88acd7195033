"""Streams and terminals open at once, per tenant and per session, counted grid-wide.

Every open stream (a streamed exec, a re-attach to a turn's events) and every
terminal holds a slot: its id is a member of two sorted sets of its kind, the
tenant's and the session's (``names.stream_slots_key``), scored with the
deadline of its lease. Taking one is one ``MULTI``: drop the members whose
lease lapsed, add this one to both sets, count both; over either cap, the slot
is taken back and the caller answers 429 (``LimitExceeded``, naming the limit,
with ``retry_after``). Two takers racing for the last slot may both be refused,
never both admitted. The holder renews its lease while it streams
(``arenew_due``) and releases it when the client goes; an API process that
dies leaks nothing: its slots lapse ``lease_s`` later. Counted in Redis rather
than per process so that the caps hold whatever the number of API processes.

Configured by ``SANDGRID_STREAMS__*`` (``sandgrid.wire.settings.StreamLimitSettings``).
Both Redis clients are accepted: the sync one (routes run in the threadpool)
and the asyncio one (the streams themselves).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import redis
import redis.asyncio as aioredis

from sandgrid.errors import LimitExceeded
from sandgrid.wire import names
from sandgrid.wire.settings import StreamLimitSettings

__all__ = ["RETRY_AFTER_S", "Kind", "Slot", "StreamSlots"]

Kind = Literal["stream", "terminal"]

#: What a refused caller is told to wait: streams last long, retrying at once is futile.
RETRY_AFTER_S = 5.0


@dataclass
class Slot:
    """One slot taken: its id, the two sets it is in, and when its lease is next renewed."""

    kind: Kind
    member: str
    keys: tuple[str, str]
    renew_at: float = field(default=0.0)


class StreamSlots:
    """Take, renew and release slots (the caps and the lease come from the settings)."""

    def __init__(self, limits: StreamLimitSettings) -> None:
        self.limits = limits

    def caps(self, kind: Kind) -> tuple[int, int]:
        """(per tenant, per session) of ``kind``."""
        if kind == "terminal":
            return self.limits.terminals_per_tenant, self.limits.terminals_per_session
        return self.limits.per_tenant, self.limits.per_session

    def acquire(self, client: redis.Redis[str], kind: Kind, tenant: str, session: str) -> Slot:
        """Take a slot (sync client).

        Raises:
            LimitExceeded: the tenant or the session has its cap of ``kind`` open.
        """
        slot, pipe = self._take(client.pipeline(transaction=True), kind, tenant, session)
        refusal = self._verdict(slot, pipe.execute())
        if refusal is not None:
            client.zrem(slot.keys[0], slot.member)
            client.zrem(slot.keys[1], slot.member)
            raise refusal
        return slot

    async def aacquire(
        self, client: aioredis.Redis[str], kind: Kind, tenant: str, session: str
    ) -> Slot:
        """Take a slot (asyncio client); see ``acquire``."""
        slot, pipe = self._take(client.pipeline(transaction=True), kind, tenant, session)
        refusal = self._verdict(slot, await pipe.execute())
        if refusal is not None:
            await self.arelease(client, slot)
            raise refusal
        return slot

    async def arenew_due(self, client: aioredis.Redis[str], slot: Slot) -> None:
        """Renew the slot's lease when a third of it has passed (cheap to call often)."""
        now = time.time()
        if now < slot.renew_at:
            return
        slot.renew_at = now + self.limits.lease_s / 3
        deadline = now + self.limits.lease_s
        async with client.pipeline(transaction=False) as pipe:
            for key in slot.keys:
                pipe.zadd(key, {slot.member: deadline}, xx=True)
                pipe.expire(key, int(self.limits.lease_s) + 1)
            await pipe.execute()

    async def arelease(self, client: aioredis.Redis[str], slot: Slot) -> None:
        """Give the slot back; shielded, so a cancelled stream (a client gone) still does."""
        with anyio.CancelScope(shield=True):
            async with client.pipeline(transaction=False) as pipe:
                for key in slot.keys:
                    pipe.zrem(key, slot.member)
                await pipe.execute()

    def _take(self, pipe: Any, kind: Kind, tenant: str, session: str) -> tuple[Slot, Any]:
        keys = (
            names.stream_slots_key(kind, "tenant", tenant),
            names.stream_slots_key(kind, "session", session),
        )
        slot = Slot(kind, secrets.token_hex(8), keys)
        now = time.time()
        slot.renew_at = now + self.limits.lease_s / 3
        for key in keys:
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zadd(key, {slot.member: now + self.limits.lease_s})
            pipe.expire(key, int(self.limits.lease_s) + 1)
            pipe.zcard(key)
        return slot, pipe

    def _verdict(self, slot: Slot, replies: list[Any]) -> LimitExceeded | None:
        tenant_open, session_open = int(replies[3]), int(replies[7])
        per_tenant, per_session = self.caps(slot.kind)
        plural = "streams" if slot.kind == "stream" else "terminals"
        for scope, count, cap in (
            ("tenant", tenant_open, per_tenant),
            ("session", session_open, per_session),
        ):
            if count > cap:
                limit = f"{plural}_per_{scope}"
                return LimitExceeded(
                    f"{limit}: at most {cap} {plural} open at once per {scope}; "
                    f"close one or retry in {RETRY_AFTER_S:.0f}s",
                    retry_after=RETRY_AFTER_S,
                    operation=slot.kind,
                    context={"limit": limit, "max": cap},
                )
        return None
