"""A session's port caps on this node: connections open at once, bytes in all.

``SANDGRID_PORTS__MAX_CONNECTIONS`` counts the connections open now (a
connection is open from the worker's admission until both of its directions
ended); ``SANDGRID_PORTS__MAX_BYTES`` counts the bytes moved both ways by all
of the session's port connections, the recorded usage of earlier owners
included (``seed``: read from Redis when this node first sees the session). A
connection that would cross the byte cap forwards what fits and is cut; a new
one after that is refused (429) before the sandbox is touched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sandgrid.errors import ErrorCode, LimitExceeded

__all__ = ["PortCaps", "Ticket"]


@dataclass
class _Usage:
    open: int = 0
    bytes: int = 0


@dataclass
class Ticket:
    """One admitted connection: counts its bytes against the session's cap."""

    caps: PortCaps
    session: str
    moved: list[int] = field(default_factory=lambda: [0, 0])
    done: bool = False
    #: A count allowed fewer bytes than asked: the connection is to be cut.
    cut: bool = False

    def count(self, direction: int, nbytes: int) -> int:
        """How many of ``nbytes`` may pass (``splice.Count``); fewer: the link is cut."""
        allowed = self.caps._take(self.session, nbytes)
        self.moved[direction] += allowed
        self.cut = self.cut or allowed < nbytes
        return allowed

    def give_back(self, direction: int, nbytes: int) -> None:
        """Bytes counted that never moved (a refusal dropped them)."""
        self.caps._give(self.session, nbytes)
        self.moved[direction] -= nbytes

    def close(self) -> None:
        """The connection ended: it no longer counts as open. Idempotent."""
        if not self.done:
            self.done = True
            self.caps._release(self.session)


class PortCaps:
    """The caps of every session served here.

    Args:
        max_connections: a session's connections open at once.
        max_bytes: a session's bytes in all, both ways.
        seed: the bytes a session's connections moved before (other nodes);
            called once per session, outside the lock.
    """

    def __init__(self, max_connections: int, max_bytes: int, seed: Callable[[str], int]) -> None:
        self.max_connections = max_connections
        self.max_bytes = max_bytes
        self._seed = seed
        self._lock = threading.Lock()
        self._usage: dict[str, _Usage] = {}

    def admit(self, session: str) -> Ticket:
        """Count one more connection of ``session``.

        Raises:
            LimitExceeded: ``port_limit``, the connections or the bytes are used up.
        """
        if session not in self._usage:
            seeded = self._seed(session)
            with self._lock:
                self._usage.setdefault(session, _Usage(bytes=seeded))
        with self._lock:
            usage = self._usage[session]
            if usage.open >= self.max_connections:
                raise _limit("connections open at once", self.max_connections, "max_connections")
            if usage.bytes >= self.max_bytes:
                raise _limit("bytes moved in all", self.max_bytes, "max_bytes")
            usage.open += 1
        return Ticket(self, session)

    def _take(self, session: str, nbytes: int) -> int:
        with self._lock:
            usage = self._usage[session]
            allowed = max(0, min(nbytes, self.max_bytes - usage.bytes))
            usage.bytes += allowed
            return allowed

    def _give(self, session: str, nbytes: int) -> None:
        with self._lock:
            usage = self._usage[session]
            usage.bytes = max(0, usage.bytes - nbytes)

    def _release(self, session: str) -> None:
        with self._lock:
            usage = self._usage.get(session)
            if usage is not None:
                usage.open -= 1

    def forget(self, session: str) -> None:
        """The session left this node (its usage is in Redis for the next owner)."""
        with self._lock:
            usage = self._usage.get(session)
            if usage is not None and usage.open <= 0:
                del self._usage[session]

    def open_sessions(self) -> list[str]:
        """The sessions with a connection open now."""
        with self._lock:
            return [session for session, usage in self._usage.items() if usage.open > 0]

    def open_now(self, session: str) -> int:
        with self._lock:
            usage = self._usage.get(session)
            return usage.open if usage else 0


def _limit(what: str, limit: int, setting: str) -> LimitExceeded:
    return LimitExceeded(
        f"the session's port connections reached their cap: {limit} {what}",
        code=ErrorCode.PORT_LIMIT,
        operation="ports",
        context={"limit": limit, "setting": f"SANDGRID_PORTS__{setting.upper()}"},
        retry_after=1.0,
    )
