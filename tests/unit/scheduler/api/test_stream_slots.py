"""Slots of streams and terminals, on the real test Redis: caps, release, leases that lapse."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis

from sandgrid.errors import LimitExceeded
from sandgrid.wire import names
from sandgrid.wire.settings import StreamLimitSettings
from scheduler.api.stream_slots import StreamSlots
from tests.conftest import TEST_REDIS_URL

LIMITS = StreamLimitSettings(
    per_tenant=3, per_session=2, terminals_per_tenant=1, terminals_per_session=1
)


def test_session_cap_then_release(redis_client: redis.Redis[str]) -> None:
    slots = StreamSlots(LIMITS)
    held = [slots.acquire(redis_client, "stream", "acme", "s-1") for _ in range(2)]
    with pytest.raises(LimitExceeded) as err:
        slots.acquire(redis_client, "stream", "acme", "s-1")
    assert err.value.context["limit"] == "streams_per_session"
    assert err.value.context["max"] == 2 and err.value.retry_after > 0
    # the refused one took nothing: one release makes room for exactly one more
    assert redis_client.zcard(names.stream_slots_key("stream", "session", "s-1")) == 2
    asyncio.run(_release(slots, held[0]))
    slots.acquire(redis_client, "stream", "acme", "s-1")


async def _release(slots: StreamSlots, slot: object) -> None:
    client: aioredis.Redis[str] = aioredis.Redis.from_url(TEST_REDIS_URL, decode_responses=True)
    try:
        await slots.arelease(client, slot)  # type: ignore[arg-type]
    finally:
        await client.aclose()  # type: ignore[attr-defined]


def test_tenant_cap_spans_sessions_and_tenants_apart(redis_client: redis.Redis[str]) -> None:
    slots = StreamSlots(LIMITS)
    for sid in ("s-1", "s-2", "s-3"):
        slots.acquire(redis_client, "stream", "acme", sid)
    with pytest.raises(LimitExceeded) as err:
        slots.acquire(redis_client, "stream", "acme", "s-4")
    assert err.value.context["limit"] == "streams_per_tenant"
    slots.acquire(redis_client, "stream", "globex", "s-9")  # another tenant is not counted
    slots.acquire(redis_client, "terminal", "acme", "s-1")  # nor another kind


def test_a_lapsed_lease_frees_its_slot(redis_client: redis.Redis[str]) -> None:
    """A crashed API process renews nothing: its slots count no more once their lease lapsed."""
    slots = StreamSlots(LIMITS)
    key = names.stream_slots_key("terminal", "tenant", "acme")
    redis_client.zadd(key, {"dead-api-slot": time.time() - 1})
    slots.acquire(redis_client, "terminal", "acme", "s-1")
    assert redis_client.zrange(key, 0, -1) != ["dead-api-slot"]
    assert redis_client.ttl(key) > 0


def test_async_acquire_refuses_and_renews(redis_client: redis.Redis[str]) -> None:
    slots = StreamSlots(LIMITS)

    async def go() -> float:
        client: aioredis.Redis[str] = aioredis.Redis.from_url(TEST_REDIS_URL, decode_responses=True)
        try:
            slot = await slots.aacquire(client, "terminal", "acme", "s-1")
            with pytest.raises(LimitExceeded) as err:
                await slots.aacquire(client, "terminal", "acme", "s-2")
            assert err.value.context["limit"] == "terminals_per_tenant"
            slot.renew_at = 0.0
            await slots.arenew_due(client, slot)
            return float(await client.zscore(slot.keys[0], slot.member) or 0)
        finally:
            await client.aclose()  # type: ignore[attr-defined]

    deadline = asyncio.run(go())
    assert deadline > time.time() + LIMITS.lease_s - 5
