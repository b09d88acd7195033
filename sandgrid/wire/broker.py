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

The channel also notes what each push of a default-priority message answered
(``LPUSH`` returns the list's length): ``pushed_depth`` gives the API's
admission the depth of a queue it sent to within the last ``DEPTH_FRESH_S``,
so a turn to a shallow queue skips its ``LLEN`` (issue 22.1).

``install`` (called by ``sandgrid.wire.celery_app.make_celery``) makes kombu's
``redis`` alias name this transport, so the broker URL and what every tool
shows of it stay ``redis://`` (Flower's Broker page picks its client by that
scheme; ``broker_transport`` set to a class path would show the path instead).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kombu.transport
import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

from sandgrid.wire import names

__all__ = [
    "DEPTH_FRESH_S",
    "SENTINEL_TRANSPORT",
    "TRANSPORT",
    "Channel",
    "QoS",
    "SentinelChannel",
    "SentinelTransport",
    "Transport",
    "install",
    "pushed_depth",
]

#: Where kombu finds this transport (the ``redis`` alias, after ``install``).
TRANSPORT = "sandgrid.wire.broker:Transport"
#: The same over Sentinel (the ``sentinel`` alias, after ``install``; 22.5).
SENTINEL_TRANSPORT = "sandgrid.wire.broker:SentinelTransport"
#: How long the length a push answered stands for its queue's (s): ``pushed_depth``.
DEPTH_FRESH_S = 1.0

#: queue -> (its length after this process's last push to it, when: monotonic s)
_pushed: dict[str, tuple[int, float]] = {}


def pushed_depth(queue: str) -> int | None:
    """The length of ``queue`` that this process's last push to it answered, if that
    push is at most ``DEPTH_FRESH_S`` old (else None: ask Redis)."""
    seen = _pushed.get(queue)
    if seen is None or time.monotonic() - seen[1] > DEPTH_FRESH_S:
        return None
    return seen[0]


class QoS(kombu_redis.QoS):
    """kombu's Redis ack emulation: no unacked record for a turn, and its
    two-command writes without ``MULTI``/``EXEC`` for any other message.

    kombu records a delivered message (``ZADD`` in the unacked index, ``HSET`` of
    its body) and drops it on ack (``ZREM``, ``HDEL``), so that a message whose
    consumer died comes back after the visibility timeout (an hour). A turn's
    message needs no such copy (issue 22.1: four commands per turn): its sender
    watches the process that holds it and sends the turn again (``attempt + 1``)
    once that process is gone (``scheduler.turns.watch``), long before the
    timeout, and a late copy of the old attempt is refused by its claim anyway.
    So a turn is kept in this process's memory alone (kombu's own ``_delivered``),
    and what the record did while this process lives is done from there: a
    turn rejected with ``requeue`` and the turns still held when the channel
    closes (a warm shutdown, a reconnect) go back to their queue, as before.
    Only a process that dies without closing its channel loses them from the
    broker, which is what the watch is for.

    Every other message keeps kombu's record, in a plain pipeline: the pair
    still goes in order on one connection; the transaction only hid the first
    command from other clients until the second, and the only other reader,
    ``restore_visible``, looks at entries older than the visibility timeout and
    restores each under ``WATCH`` (``restore_by_tag``, whose own transaction this
    leaves alone). A pipeline cut by a lost connection leaves at most the first
    command applied: on delivery an index entry without a body, which the
    restore drops; on ack the body is deleted first, for the same reason.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: delivery tags of the turns held in memory alone (acks come from other threads:
        #: a set's add and discard are atomic)
        self._turns: set[Any] = set()

    def append(self, message: Any, delivery_tag: Any) -> None:
        """Record the delivery in Redis, unless it is a turn's (kept in memory only)."""
        if (message.headers or {}).get("task") != names.TASK_TURN:
            super().append(message, delivery_tag)
            return
        self._turns.add(delivery_tag)
        virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: Any) -> None:
        """Drop the delivery's record (a turn's: in memory only)."""
        if delivery_tag in self._turns:
            self._turns.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        """A turn rejected with ``requeue`` goes back to its queue from memory."""
        if delivery_tag not in self._turns:
            super().reject(delivery_tag, requeue=requeue)
            return
        if requeue:
            channel: Any = self.channel  # ours: the stubs know the base channel only
            with channel.conn_or_acquire() as client:
                self._put_back(self._held()[delivery_tag], client, leftmost=True)
        self.ack(delivery_tag)

    def restore_unacked(self, client: Any = None) -> None:
        """Put back what this channel holds unacked: turns from memory, the rest
        from their records (kombu's ``restore_by_tag``)."""
        channel: Any = self.channel
        held = self._held()
        with channel.conn_or_acquire(client) as client:
            for tag, message in list(held.items()):
                if tag in self._turns:
                    self._put_back(message, client)
                else:
                    self.restore_by_tag(tag, client=client)
        held.clear()
        self._turns.clear()

    def _held(self) -> Any:
        """kombu's ``_delivered``: delivery tag -> message (set in its ``__init__``)."""
        return self._delivered

    def _put_back(self, message: Any, client: Any, leftmost: bool = False) -> None:
        """Push a held message back onto its queue (marked redelivered, as kombu does)."""
        info = message.delivery_info
        channel: Any = self.channel
        channel._do_restore_message(
            message._raw, info["exchange"], info["routing_key"], client, leftmost
        )

    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Iterator[Any]:
        """The given pipeline (a restore's transaction), else a plain one."""
        if pipe:
            yield pipe
            return
        channel: Any = self.channel  # ours: the stubs know the base channel only
        with channel.conn_or_acquire(client) as conn:
            yield conn.pipeline(transaction=False)

    def _remove_from_indices(self, delivery_tag: Any, pipe: Any = None) -> Any:
        """``HDEL`` the body, then ``ZREM`` the index entry (see the class doc)."""
        with self.pipe_or_acquire(pipe) as pipe:
            return pipe.hdel(self.unacked_key, delivery_tag).zrem(
                self.unacked_index_key, delivery_tag
            )


class Channel(kombu_redis.Channel):
    """kombu's Redis channel with one long-lived publish client and ``QoS``."""

    QoS = QoS
    _shared_client: Any = None

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        """Push a message; the list's length it answers is noted (``pushed_depth``)
        when it went to the queue's own list (default priority, no batch, no expiry)."""
        this: Any = self  # kombu's Redis channel: the stubs know the base channel only
        key = this._q_for_pri(queue, self._get_message_priority(message, reverse=False))
        expires: Any = this._expires
        if key != queue or kwargs.get("_publish_batch") is not None or queue in expires:
            super()._put(queue, message, **kwargs)
            return
        with self.conn_or_acquire() as client:
            depth = client.lpush(key, dumps(message))
        _pushed[queue] = (int(depth), time.monotonic())

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
