"""The node's session table: which local sandbox serves which session.

One table per node (the Celery worker runs a thread pool in one process, so
every task thread sees the same table). An entry lives from the turn that
brought the session here until the session is closed, goes idle, or its
sandbox is lost; the container is then destroyed, never reused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sandgrid.models import SessionInfo
from worker.sandboxes import Sandbox
from worker.sessions.gate import SessionGate
from worker.snapshots import Manifest

__all__ = ["LocalSession", "SessionTable"]


@dataclass
class LocalSession:
    """A session served on this node.

    Attributes:
        session_id: the session.
        tenant: its tenant (a container serves one tenant's one session).
        sandbox: the backend's handle of the session's container.
        manifest: the manifest of the session's latest snapshot, kept to diff
            the next snapshot against without a store round trip.
        snapshot: the reference of that snapshot.
        dirty: the workspace changed since the last snapshot.
        last_used: monotonic time of the last turn's end.
        gate: shared by the session's turns, taken alone by what needs none
            running (``worker.sessions.gate``).
        saving: orders the session's snapshots and the records that name them.
    """

    session_id: str
    tenant: str
    sandbox_type: str
    sandbox: Sandbox
    manifest: Manifest | None = None
    snapshot: str | None = None
    policy: str = "after_turn"
    dirty: bool = False
    last_used: float = field(default_factory=time.monotonic)
    gate: SessionGate = field(default_factory=SessionGate)
    saving: threading.Lock = field(default_factory=threading.Lock)
    on_idle: str = "release"
    """``memory``: the reaper pauses it with its processes (issue 24), not a release."""

    @classmethod
    def serving(cls, info: SessionInfo, sandbox: Sandbox) -> LocalSession:
        """The entry of session ``info`` served by ``sandbox`` (nothing restored yet)."""
        return cls(
            session_id=info.id,
            tenant=info.tenant,
            sandbox_type=info.type,
            sandbox=sandbox,
            policy=info.snapshot_policy,
            on_idle=info.on_idle,
        )


class SessionTable:
    """Thread-safe map of session id to ``LocalSession``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, LocalSession] = {}
        self._arrivals: dict[str, threading.Lock] = {}
        self._restoring: set[str] = set()

    def arrival(self, session_id: str) -> threading.Lock:
        """The lock under which a session is brought to this node: of the turns that
        find it absent at once, one leases and restores it, the others then find it."""
        with self._lock:
            return self._arrivals.setdefault(session_id, threading.Lock())

    @contextmanager
    def restoring(self, session_id: str) -> Iterator[None]:
        """While a leased session is restored here (a memory image can take longer
        than the lease's TTL on a loaded node, 24.2): its lease is renewed as if
        it were resident (``ids``)."""
        with self._lock:
            self._restoring.add(session_id)
        try:
            yield
        finally:
            with self._lock:
                self._restoring.discard(session_id)

    def get(self, session_id: str) -> LocalSession | None:
        with self._lock:
            return self._entries.get(session_id)

    def put(self, entry: LocalSession) -> None:
        with self._lock:
            self._entries[entry.session_id] = entry

    def pop(self, session_id: str) -> LocalSession | None:
        with self._lock:
            self._arrivals.pop(session_id, None)
            return self._entries.pop(session_id, None)

    def ids(self) -> list[str]:
        """The sessions whose leases this node renews: resident, or being restored."""
        with self._lock:
            return list(self._entries.keys() | self._restoring)

    def idle_since(self, cutoff: float) -> list[LocalSession]:
        """Entries whose last turn ended before ``cutoff`` (monotonic)."""
        with self._lock:
            return [e for e in self._entries.values() if e.last_used < cutoff]

    def container_ids(self) -> set[str]:
        with self._lock:
            return {e.sandbox.id for e in self._entries.values()}

    def __iter__(self) -> Iterator[LocalSession]:
        with self._lock:
            return iter(list(self._entries.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
