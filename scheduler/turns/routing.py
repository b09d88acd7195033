"""Choose the queue of a turn: the owner's direct queue, or the shared one.

A session whose container is live on worker W (W holds the lease and W's
heartbeat has not lapsed) goes to ``node.W``: no restore, lowest latency. A
session paused with memory whose image node S staged ahead goes to ``node.S``
while S lives: its restore skips the image's fetch (``memory_staged_on``,
docs/memory.md). Any other session goes to the shared queue of its sandbox type, where any worker
serving that type takes it and restores the latest snapshot; batch jobs use the
type's batch queue so that they never delay interactive turns. The API's turns
ask the owner's liveness of its cached view of the heartbeats first
(``CachedLiveness``).
"""

from __future__ import annotations

from typing import Protocol

from sandgrid.models import SessionInfo
from sandgrid.wire import names

__all__ = ["CachedLiveness", "LivenessSource", "choose_queue", "route"]


class LivenessSource(Protocol):
    """What routing needs to know about nodes (``SessionRegistry`` is one)."""

    def node_alive(self, node: str) -> bool: ...


def choose_queue(
    session: SessionInfo, *, owner_alive: bool, batch: bool = False, staged_alive: bool = False
) -> str:
    """The queue for a turn of ``session``, from facts already known (pure).

    Args:
        session: the session, with ``owner`` read from its lease.
        owner_alive: whether the owner's heartbeat is current.
        batch: a batch job (shared batch queue when the session is not live).
        staged_alive: whether the node that staged the session's memory image
            (``memory_staged_on``) lives: a paused session's resume goes there and
            skips the image's fetch (``worker.turns.memory_stage``).
    """
    if session.owner and owner_alive:
        return names.node_queue(session.owner)
    if session.memory_image and session.memory_staged_on and staged_alive:
        return names.node_queue(session.memory_staged_on)
    return names.batch_queue(session.type) if batch else names.type_queue(session.type)


def route(nodes: LivenessSource, session: SessionInfo, *, batch: bool = False) -> str:
    """The queue for a turn of ``session``; asks ``nodes`` whether the owner (or, for a
    session paused with memory, the node that staged its image) lives."""
    alive = bool(session.owner) and nodes.node_alive(session.owner or "")
    staged = session.memory_staged_on if session.memory_image and not alive else None
    return choose_queue(
        session,
        owner_alive=alive,
        batch=batch,
        staged_alive=bool(staged) and nodes.node_alive(staged or ""),
    )


class CachedLiveness:
    """Whether a node lives, from the API's cached view of the heartbeats first.

    A turn's routing asked Redis (``EXISTS`` of the owner's heartbeat) on every
    turn; the API already keeps every heartbeat record for ``NODES_CACHE_S``
    (``scheduler.registry.nodes``). A node the view shows alive is taken as alive
    (issue 22.1: a command and a round trip less per turn): one that died within
    the view's age gets the turn on its direct queue, and the turn's watch sends
    it again, as for a node that dies just after a turn was routed to it. A node
    the view does not show is asked for uncached: a view older than the owner's
    first heartbeat must not send its turns to a shared queue, where another node
    would find the session's lease held.

    Args:
        cached: the API's view of the live nodes (``NodeDirectory``).
        fresh: the uncached check (``SessionRegistry``).
    """

    def __init__(self, cached: _Alive, fresh: LivenessSource) -> None:
        self.cached = cached
        self.fresh = fresh

    def node_alive(self, node: str) -> bool:
        return self.cached.alive(node) or self.fresh.node_alive(node)


class _Alive(Protocol):
    def alive(self, node: str, incarnation: str = "") -> bool: ...
