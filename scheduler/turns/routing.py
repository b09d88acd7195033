"""Choose the queue of a turn: the owner's direct queue, or the shared one.

A session whose container is live on worker W (W holds the lease and W's
heartbeat has not lapsed) goes to ``node.W``: no restore, lowest latency. Any
other session goes to the shared queue of its sandbox type, where any worker
serving that type takes it and restores the latest snapshot; batch jobs use the
type's batch queue so that they never delay interactive turns.
"""

from __future__ import annotations

from typing import Protocol

from sandgrid.models import SessionInfo
from sandgrid.wire import names

__all__ = ["LivenessSource", "choose_queue", "route"]


class LivenessSource(Protocol):
    """What routing needs to know about nodes (``SessionRegistry`` is one)."""

    def node_alive(self, node: str) -> bool: ...


def choose_queue(session: SessionInfo, *, owner_alive: bool, batch: bool = False) -> str:
    """The queue for a turn of ``session``, from facts already known (pure).

    Args:
        session: the session, with ``owner`` read from its lease.
        owner_alive: whether the owner's heartbeat is current.
        batch: a batch job (shared batch queue when the session is not live).
    """
    if session.owner and owner_alive:
        return names.node_queue(session.owner)
    return names.batch_queue(session.type) if batch else names.type_queue(session.type)


def route(nodes: LivenessSource, session: SessionInfo, *, batch: bool = False) -> str:
    """The queue for a turn of ``session``; asks ``nodes`` whether the owner lives."""
    alive = bool(session.owner) and nodes.node_alive(session.owner or "")
    return choose_queue(session, owner_alive=alive, batch=batch)
