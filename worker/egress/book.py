"""Where the egress proxy reads policies and writes attempts and usage.

``EgressBook`` is the interface the proxy uses (async: it runs on the proxy's
event loop); ``RedisBook`` its implementation. The policy is read from the
session record (field ``network`` of ``sg:session:<id>``) on every connection,
so ``PATCH /v1/sessions/{id}/network`` holds for the next connection. Attempts
go to a bounded Redis Stream per session (``names.egress_audit_key``), one
entry ``{"a": <NetworkAttempt JSON>}`` each; usage to a hash
(``names.egress_usage_key``, with the node's connection limits in its field
``limits``), both expiring ``ttl_s`` after the last write.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod

from sandgrid.models import EgressLimits, NetworkAttempt, NetworkPolicy
from sandgrid.wire import names, redis_connect

__all__ = ["EgressBook", "RedisBook", "Usage"]


class Usage:
    """A session's egress so far: connections opened and bytes moved both ways."""

    __slots__ = ("bytes", "connections")

    def __init__(self, connections: int = 0, bytes: int = 0) -> None:
        self.connections = connections
        self.bytes = bytes


class EgressBook(ABC):
    """Policies in, attempts and usage out."""

    @abstractmethod
    async def policy(self, session_id: str) -> NetworkPolicy | None:
        """The session's current policy; None: no network (or no such session)."""

    @abstractmethod
    async def usage(self, session_id: str) -> Usage:
        """The session's usage recorded so far (by any node)."""

    @abstractmethod
    async def record(self, session_id: str, attempt: NetworkAttempt) -> None:
        """Append one attempt to the session's audit."""

    @abstractmethod
    async def add_usage(self, session_id: str, connections: int, nbytes: int) -> None:
        """Add to the session's recorded usage."""

    async def show_limits(self, session_id: str, limits: EgressLimits) -> None:  # noqa: B027
        """Say which connection limits hold the session's connections (not kept by default)."""

    async def aclose(self) -> None:  # noqa: B027 - a book without connections has none to close
        """Release connections (none by default)."""


class RedisBook(EgressBook):
    """The book in Redis.

    Args:
        url: the grid's Redis URL.
        max_len: attempts kept per session (older ones are trimmed).
        ttl_s: the audit and usage keys expire this long after their last write.
    """

    def __init__(self, url: str, *, max_len: int = 1000, ttl_s: int = 7 * 86400) -> None:
        self.redis = redis_connect.connect_async(url, decode_responses=True)
        self.max_len = max_len
        self.ttl_s = ttl_s

    async def policy(self, session_id: str) -> NetworkPolicy | None:
        raw = await self.redis.hget(names.session_key(session_id), "network")
        value = json.loads(raw) if raw else None
        return NetworkPolicy.model_validate(value) if value else None

    async def usage(self, session_id: str) -> Usage:
        raw = await self.redis.hgetall(names.egress_usage_key(session_id))
        return Usage(int(raw.get("connections", 0)), int(raw.get("bytes", 0)))

    async def record(self, session_id: str, attempt: NetworkAttempt) -> None:
        key = names.egress_audit_key(session_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(key, {"a": attempt.model_dump_json()}, maxlen=self.max_len, approximate=False)
        pipe.expire(key, self.ttl_s)
        await pipe.execute()

    async def add_usage(self, session_id: str, connections: int, nbytes: int) -> None:
        key = names.egress_usage_key(session_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(key, "connections", connections)
        pipe.hincrby(key, "bytes", nbytes)
        pipe.expire(key, self.ttl_s)
        await pipe.execute()

    async def show_limits(self, session_id: str, limits: EgressLimits) -> None:
        key = names.egress_usage_key(session_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(key, "limits", limits.model_dump_json())
        pipe.expire(key, self.ttl_s)
        await pipe.execute()

    async def aclose(self) -> None:
        await self.redis.connection_pool.disconnect()
