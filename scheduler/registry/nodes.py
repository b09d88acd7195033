"""The live worker nodes as the API sees them: who serves which type, which process.

Every node's heartbeat record (``sandgrid.wire.ledger.NodeRecord``) names its
incarnation and its types. The API reads them all at once and keeps them for
``cache_s`` (well under a heartbeat), shared by every request thread: creating
a session or running a turn of a type no live node serves is refused at once
(503 ``no_capacity``) instead of waiting for a deadline, and a turn's waiter
learns, from the same cached view, whether the process holding its turn lives.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from sandgrid.errors import CapacityError
from sandgrid.wire.ledger import NodeRecord

__all__ = ["NODES_CACHE_S", "NO_CAPACITY_RETRY_AFTER_S", "NodeDirectory", "NodeSource"]

#: How long the API trusts its view of the live nodes (s); a heartbeat is 3 s.
NODES_CACHE_S = 0.5
#: Retry-After (s) of ``no_capacity``: about the time a restarted worker needs.
NO_CAPACITY_RETRY_AFTER_S = 5.0


class NodeSource(Protocol):
    """Where the heartbeat records are (``RedisLedger`` is one)."""

    def node_records(self) -> dict[str, NodeRecord]: ...


class NodeDirectory:
    """A briefly cached view of the live nodes.

    Args:
        source: reads every live node's heartbeat record.
        cache_s: how long one read serves (0: every call reads).
    """

    def __init__(self, source: NodeSource, *, cache_s: float = NODES_CACHE_S) -> None:
        self.source = source
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._records: dict[str, NodeRecord] = {}
        self._read_at = float("-inf")

    def records(self) -> dict[str, NodeRecord]:
        """Live nodes by name, at most ``cache_s`` old."""
        with self._lock:
            if time.monotonic() - self._read_at >= self.cache_s:
                self._records = self.source.node_records()
                self._read_at = time.monotonic()
            return self._records

    def serving(self, sandbox_type: str) -> list[str]:
        """The live nodes that serve ``sandbox_type``, sorted by name."""
        return sorted(_serving(self.records(), sandbox_type))

    def incarnations(self, sandbox_type: str) -> frozenset[str]:
        """The live processes serving ``sandbox_type``, as ``node/incarnation``."""
        found = self.records()
        return frozenset(f"{n}/{found[n].inc}" for n in _serving(found, sandbox_type))

    def incarnation(self, node: str) -> str | None:
        """The live process of ``node`` (``''`` when its record names none), or None."""
        rec = self.records().get(node)
        return None if rec is None else rec.inc

    def alive(self, node: str, incarnation: str = "") -> bool:
        """Whether ``node`` lives, and as ``incarnation`` when one is given."""
        live = self.incarnation(node)
        return live is not None and (not incarnation or not live or live == incarnation)

    def require(self, sandbox_type: str, operation: str) -> None:
        """Refuse work of a type that no live node serves.

        Raises:
            CapacityError: 503 ``no_capacity``, retryable, ``retry_after`` in its context.
        """
        if not self.serving(sandbox_type) and not self._serving_now(sandbox_type):
            raise CapacityError(
                f"no live worker serves type {sandbox_type!r}",
                operation=operation,
                context={"type": sandbox_type, "retry_after": NO_CAPACITY_RETRY_AFTER_S},
            )

    def _serving_now(self, sandbox_type: str) -> bool:
        """Read the records again before a refusal: a node that started beating
        within the cache's life must not be refused (a refusal is rare, a read cheap)."""
        with self._lock:
            self._records = self.source.node_records()
            self._read_at = time.monotonic()
            return bool(_serving(self._records, sandbox_type))


def _serving(records: dict[str, NodeRecord], sandbox_type: str) -> list[str]:
    return [n for n, rec in records.items() if rec.types is None or sandbox_type in rec.types]
