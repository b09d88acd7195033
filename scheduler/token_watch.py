"""A change of tokens reaches every API process's token cache at once.

Each API process caches token lookups for ``auth_cache_s`` (``TenantStore``), so
that a turn costs no round trip for its token. A rotated or revoked token must
still be refused at once by every API process, not when its cache entry expires:

* every API process runs a ``TokenWatch``, subscribed to
  ``names.tokens_changed_channel()`` (per Redis database, since pub/sub is not);
  on a message it drops its cache, then pushes an acknowledgement to the
  change's ``names.tokens_ack_key``;
* whoever changes tokens (``sandgrid tenants rotate|revoke|set``) calls
  ``announce`` after the change is written: ``PUBLISH`` says how many processes
  were subscribed, and ``announce`` waits (bounded) until each has acknowledged.
  When it returns complete, no API process can answer from a stale entry.

A process whose subscription broke drops its cache when it subscribes again (it
may have missed a change), and until then its entries still expire after
``auth_cache_s``: the bound that holds whatever happens to Redis.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from sandgrid.wire import names

__all__ = ["ANNOUNCE_WAIT_S", "Refreshed", "TokenWatch", "announce", "changes_channel"]

log = logging.getLogger(__name__)

#: How long ``announce`` waits for the API processes' acknowledgements.
ANNOUNCE_WAIT_S = 3.0
#: How long an acknowledgement list outlives a change nobody waits for any more.
_ACK_TTL_S = 60
#: A broken subscription is tried again after this long.
_RETRY_S = 1.0


@dataclass(frozen=True)
class Refreshed:
    """What ``announce`` learnt: the API processes listening, and those that confirmed."""

    listeners: int
    confirmed: int

    @property
    def complete(self) -> bool:
        """Every listening process dropped its cache."""
        return self.confirmed >= self.listeners


def changes_channel(client: redis.Redis[str]) -> str:
    """The channel of ``client``'s database (pub/sub ignores databases, grids may share
    one Redis server)."""
    db = client.connection_pool.connection_kwargs.get("db", 0)
    return f"{names.tokens_changed_channel()}:{db}"


def announce(client: redis.Redis[str], *, wait_s: float = ANNOUNCE_WAIT_S) -> Refreshed:
    """Tell every API process that tokens changed; wait until each dropped its cache.

    Returns:
        how many processes were subscribed, and how many confirmed within ``wait_s``.
    """
    change = uuid.uuid4().hex
    ack = names.tokens_ack_key(change)
    listeners = int(client.publish(changes_channel(client), change))
    confirmed, deadline = 0, time.monotonic() + wait_s
    while confirmed < listeners and (left := deadline - time.monotonic()) > 0:
        if client.blpop([ack], timeout=max(left, 0.01)) is None:
            break
        confirmed += 1
    client.delete(ack)
    return Refreshed(listeners, confirmed)


class TokenWatch:
    """Runs ``on_change`` (drop the cache) on every announced change, in a daemon thread.

    Args:
        client: the process's Redis client (the subscription takes one connection).
        on_change: what to do on a change, and after (re)subscribing.
    """

    def __init__(self, client: redis.Redis[str], on_change: Callable[[], None]) -> None:
        self.client = client
        self.on_change = on_change
        self._stop = threading.Event()
        self._tried = threading.Event()
        self._wake = f"{names.tokens_changed_channel()}:wake:{uuid.uuid4().hex}"
        self._thread: threading.Thread | None = None

    def start(self, wait_s: float = 2.0) -> None:
        """Subscribe in a thread; return once the first attempt succeeded or failed."""
        self._thread = threading.Thread(target=self._run, name="token-watch", daemon=True)
        self._thread.start()
        self._tried.wait(wait_s)

    def stop(self) -> None:
        """Stop the thread at once (it is woken through its own channel)."""
        self._stop.set()
        with contextlib.suppress(redis.RedisError):  # then the thread is not reading: the flag
            self.client.publish(self._wake, "stop")
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self.client.pubsub()
            try:
                self._listen(pubsub)
            except (redis.RedisError, OSError) as exc:
                log.warning("token watch: subscription lost (%s); retrying", type(exc).__name__)
            finally:
                self._tried.set()
                pubsub.close()
            self._stop.wait(_RETRY_S)

    def _listen(self, pubsub: Any) -> None:
        channel = changes_channel(self.client)
        pubsub.subscribe(channel, self._wake)
        subscribed = 0
        while subscribed < 2 and not self._stop.is_set():  # both confirmed by the server
            message = pubsub.get_message(timeout=1.0)
            subscribed += bool(message and message["type"] == "subscribe")
        self.on_change()  # a change may have been missed while not subscribed
        self._tried.set()
        while not self._stop.is_set():
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=30.0)
            if message and message["channel"] == channel:
                self.on_change()
                ack = names.tokens_ack_key(str(message["data"]))
                self.client.pipeline().rpush(ack, "1").expire(ack, _ACK_TTL_S).execute()
