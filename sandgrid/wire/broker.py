"""The broker transport: kombu's Redis transport, with one client per channel.

kombu's Redis ``Channel.conn_or_acquire`` builds a new redis-py ``Redis`` object
for every publish, fanout event and ack (``_create_client``): a client object
costs a ~170-entry response-callback table, ~50-140 us of CPU, and every turn
paid it about twice in the API (the task, its ``task-sent`` event) and five
times in the worker (the unacked record, three task events, the ack). The
connections themselves already came from the channel's pool, so this channel
keeps one client over that pool for its life and hands it out instead; a
redis-py client over a pool is safe to share between threads (each command
checks a connection out). A channel that is closed or revived after a broker
outage is a new channel, with a new client.

``install`` (called by ``sandgrid.wire.celery_app.make_celery``) makes kombu's
``redis`` alias name this transport, so the broker URL and what every tool
shows of it stay ``redis://`` (Flower's Broker page picks its client by that
scheme; ``broker_transport`` set to a class path would show the path instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kombu.transport
import redis
from kombu.transport import redis as kombu_redis

__all__ = [
    "SENTINEL_TRANSPORT",
    "TRANSPORT",
    "Channel",
    "SentinelChannel",
    "SentinelTransport",
    "Transport",
    "install",
]

#: Where kombu finds this transport (the ``redis`` alias, after ``install``).
TRANSPORT = "sandgrid.wire.broker:Transport"
#: The same over Sentinel (the ``sentinel`` alias, after ``install``; 22.5).
SENTINEL_TRANSPORT = "sandgrid.wire.broker:SentinelTransport"


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with one long-lived publish client."""

    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """The given client, else this channel's own (made once, on first use)."""
        if client:
            yield client
            return
        if self._shared_client is None:
            if getattr(self.connection, "client", None) is None:
                # let go of (a broker outage): kombu's own _create_client would
                # raise an AttributeError here, which Celery takes for a crash
                raise redis.ConnectionError("the broker connection is closed")
            self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield self._shared_client

    def close(self) -> None:
        """Close the channel; its client goes with it (its pool is the channel's).

        kombu's close puts the unacked messages back through ``conn_or_acquire``,
        so the client is dropped after it, not before; when the connection was
        already let go (a broker outage) and no client is left, that restore
        raises a redis ``ConnectionError``, which Celery ignores on close, and
        the messages come back by the visibility timeout instead. kombu's stock
        channel raised an AttributeError there, which stopped a worker's Celery
        consumer instead of reconnecting it (found by the Sentinel failover
        chaos test, 22.5).
        """
        try:
            super().close()
        finally:
            self._shared_client = None


class Transport(kombu_redis.Transport):
    """kombu's Redis transport over ``Channel``."""

    Channel = Channel


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel (the primary asked of the sentinels) with one
    long-lived publish client; after a failover the pool's connections find the
    new primary, so the client stays valid."""


class SentinelTransport(kombu_redis.SentinelTransport):
    """kombu's Sentinel transport over ``SentinelChannel``."""

    Channel = SentinelChannel


def install() -> None:
    """Make ``redis://`` and ``sentinel://`` broker URLs of this process use
    ``Transport`` and ``SentinelTransport`` (idempotent)."""
    for alias, path in (("redis", TRANSPORT), ("sentinel", SENTINEL_TRANSPORT)):
        if kombu.transport.TRANSPORT_ALIASES.get(alias) != path:
            kombu.transport.TRANSPORT_ALIASES[alias] = path
            # kombu caches what an alias resolved to; drop the stock class if it did.
            cache: dict[str, Any] = getattr(kombu.transport, "_transport_cache", {})
            cache.pop(alias, None)
