"""How long the Redis this process talks to has served as its primary (issue 22.5).

A node's heartbeat record lapses while Redis cannot be reached, so a record
that is missing just after an outage is no proof that the node died
(``scheduler.turns.watch``): only once Redis has served long enough for every
live node to beat again. After a restart, the server's own uptime says how
long that is. After a Sentinel failover it does not: the promoted replica has
run for as long as the group has, while the records it holds lapsed during
the failover (the API took a live node for lost and sent its turn again).

What a failover changes is the server's identity: a promoted replica answers
with another run id and a new replication id (``INFO server replication``; a
restart gives a new run id too). So a server whose identity this process has
not seen before counts from the moment it is first seen, and never for longer
than its uptime. The first identity of all is taken at its uptime: there is
nothing to compare it with (the API reads it as it starts, so that a failover
after that is seen as one).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import redis

__all__ = ["ServingClock"]


class ServingClock:
    """Seconds the current Redis primary has served, as this process saw it.

    Args:
        client: the registry's Redis client (``decode_responses=True``).
        clock: a monotonic clock (tests give a fake one).
    """

    def __init__(
        self, client: redis.Redis[str], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.redis = client
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: tuple[str, float] | None = None  # (identity, since) on ``clock``

    def served_s(self) -> float:
        """One ``INFO server replication``: how long this primary has served."""
        info = self.redis.info("server", "replication")
        uptime = float(info["uptime_in_seconds"])
        identity = f"{info.get('run_id', '')}/{info.get('master_replid', '')}"
        now = self.clock()
        with self._lock:
            if self._seen is None:
                self._seen = (identity, now - uptime)
            elif self._seen[0] != identity:  # restarted, or a replica was promoted
                self._seen = (identity, now)
            since = self._seen[1]
        return min(uptime, now - since)

    def prime(self) -> None:
        """Read the first identity now (the API's start), so that a failover later
        is seen as one; best effort: with Redis away, the first read later does it."""
        with contextlib.suppress(redis.RedisError):
            self.served_s()
