"""The warm sandboxes a pool holds, per type, oldest first, with when each last answered.

The pool's state of what waits (``worker.sessions.pool.WarmPool``): the pool
does the creating, pinging and destroying, outside its lock; this set only
says which sandbox goes where, and is used under that lock (not thread-safe on
its own). A sandbox taken out of it for any reason (a take, a trim, a prune)
leaves its answer time behind, so a sandbox is trusted only while it waits.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator

from worker.sandboxes import Sandbox

__all__ = ["WarmSet"]


class WarmSet:
    """Warm sandboxes by type, each in one queue, oldest first.

    Args:
        types: the types to hold a queue for from the start (others get one when added).
    """

    def __init__(self, types: Iterable[str] = ()) -> None:
        self._queues: dict[str, deque[Sandbox]] = {t: deque() for t in types}
        self._answered: dict[str, float] = {}  # sandbox id -> monotonic time of its ping

    def __iter__(self) -> Iterator[Sandbox]:
        return (s for q in self._queues.values() for s in q)

    def count(self, sandbox_type: str) -> int:
        return len(self._queues.get(sandbox_type, ()))

    def waiting(self, sandbox_type: str) -> list[Sandbox]:
        """The sandboxes of a type that wait, oldest first (left where they are)."""
        return list(self._queues.get(sandbox_type, ()))

    def add_type(self, sandbox_type: str) -> None:
        self._queues.setdefault(sandbox_type, deque())

    def put(self, sbx: Sandbox) -> None:
        """A sandbox that answered its warm ping just now waits, newest last."""
        self._queues.setdefault(sbx.sandbox_type, deque()).append(sbx)
        self._answered[sbx.id] = time.monotonic()

    def take(self, sandbox_type: str) -> tuple[Sandbox, float | None] | None:
        """The oldest warm sandbox of a type and when it last answered; None: none waits."""
        queue = self._queues.get(sandbox_type)
        if not queue:
            return None
        sbx = queue.popleft()
        return sbx, self._answered.pop(sbx.id, None)

    def above(self, sandbox_type: str, keep: int, *, oldest: bool = False) -> list[Sandbox]:
        """Take out the sandboxes of a type beyond ``keep`` (newest first, or the oldest)."""
        queue = self._queues.get(sandbox_type, deque())
        out = []
        while len(queue) > keep:
            out.append(queue.popleft() if oldest else queue.pop())
        return self._forget(out)

    def types(self) -> list[str]:
        return list(self._queues)

    def remove(self, ids: set[str]) -> list[Sandbox]:
        """Take out the sandboxes whose ids are in ``ids``."""
        out = [s for s in self if s.id in ids]
        for queue in self._queues.values():
            for sbx in [s for s in queue if s.id in ids]:
                queue.remove(sbx)
        return self._forget(out)

    def drain(self) -> list[Sandbox]:
        """Take out every sandbox."""
        out = list(self)
        for queue in self._queues.values():
            queue.clear()
        return self._forget(out)

    def _forget(self, sandboxes: list[Sandbox]) -> list[Sandbox]:
        for sbx in sandboxes:
            self._answered.pop(sbx.id, None)
        return sandboxes
