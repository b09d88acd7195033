"""What a worker node asks of the session registry: the ledger of leases and turns.

The registry lives in Redis and belongs to the control plane, but a worker must
take and renew leases, claim turns, record them and keep session records up to
date. This interface is that part of the contract, and nothing more: the worker
depends on it (never on ``scheduler``), ``RedisLedger``
(``sandgrid.wire.redis_ledger``) implements it once, and the scheduler's
``SessionRegistry`` builds its control-plane operations on that implementation.

Operations, by who they protect:
    * turns: ``receive_turn`` (who holds a message, so the API knows whom to
      watch), ``claim_turn`` (a turn runs at most once), ``record_turn``.
    * leases: ``acquire_lease``, ``renew_leases``, ``release_lease``,
      ``lease_owner`` (one node holds a session at a time), ``heartbeat`` (a
      dead node's leases can be taken).
    * records: ``get_any``, ``update``.
    * snapshot collection: ``note_gc_tenant``, ``gc_tenants``, ``claim_gc``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from sandgrid.models import SessionInfo

__all__ = ["Claim", "NodeRecord", "SessionLedger"]


class Claim(IntEnum):
    """What ``claim_turn`` answered; false only when the turn must not run."""

    REFUSED = 0
    CLAIMED = 1
    #: claimed, and the turn was cancelled before the claim (its record says so):
    #: it answers ``cancelled`` without running (``worker.turns.interactive``)
    CANCELLED = 2


class NodeRecord(BaseModel):
    """What a node's heartbeat says: when, which process, which types.

    The incarnation is a random id per worker process: a node restarted under
    the same name is a new incarnation, so whoever watches a turn held by the
    old one sees it dead even though the name's heartbeat never lapsed.
    ``types`` is None for a record that does not say (it may serve any type).
    """

    model_config = ConfigDict(frozen=True)

    v: Literal[1] = 1
    ts: float
    inc: str = ""
    types: tuple[str, ...] | None = None
    #: The port of the node's Prometheus ``/metrics`` (None: the node does not say).
    metrics_port: int | None = None
    metrics_host: str = ""
    #: Issue 21.1: ``host:port`` of the node's port listener ("": it has none).
    ports_addr: str = ""


class SessionLedger(ABC):
    """The registry operations of the data plane (see the module doc)."""

    # ---- turns -------------------------------------------------------------------

    @abstractmethod
    def receive_turn(self, turn_id: str, node: str, attempt: int, incarnation: str) -> bool:
        """When a message is reserved (prefetched): note which process holds it.

        A message a worker reserved but has not claimed yet is in no queue the
        API can see; when that process dies, the API must know to send the turn
        again (Redis would hand the message out only after the visibility
        timeout, an hour later).

        Returns:
            True when noted; False when the turn is no longer queued under this
            attempt (the message is stale: its claim will be refused too).
        """

    @abstractmethod
    def claim_turn(self, turn_id: str, node: str, attempt: int = 1, incarnation: str = "") -> Claim:
        """Before running a turn: move its record from queued to running, atomically.

        Args:
            turn_id: the turn.
            node: the node that is about to run it.
            attempt: the attempt this message carries; an older one is refused.
            incarnation: the claiming process (see ``NodeRecord``).

        Returns:
            ``CLAIMED`` when the turn may run (also when no record exists: nothing
            to guard); ``CANCELLED`` when it may, but its record says it was
            cancelled (the same read: issue 22.1); ``REFUSED`` (false) when it was
            abandoned by the API, is already running or done (a redelivered
            message), or the attempt is stale: do not run it.
        """

    @abstractmethod
    def record_turn(
        self,
        session_id: str,
        snapshot: str | None = None,
        turn_id: str | None = None,
        *,
        unsaved: bool = False,
    ) -> None:
        """Count a finished turn, stamp ``last_used`` and keep the latest snapshot.

        Args:
            session_id: the session.
            snapshot: the snapshot taken after the turn, if any.
            turn_id: kept as ``last_turn``: a turn re-dispatched after its worker
                died is not run again when the record shows it completed.
            unsaved: the workspace has changes no snapshot holds; a turn whose
                worker dies is then not run again from a stale snapshot.

        Raises:
            NotFound: the session record is gone.
        """

    # ---- leases and heartbeats -----------------------------------------------------

    @abstractmethod
    def acquire_lease(self, session_id: str, node: str) -> bool:
        """Take the session's lease for ``node``, atomically, for the lease TTL.

        Returns:
            True when the lease was free or expired, already held by ``node``
            (then it is extended), or held by a node whose heartbeat has lapsed.
            False when another live node holds it.
        """

    @abstractmethod
    def renew_leases(self, node: str, ids: Iterable[str]) -> list[str]:
        """Extend the leases that ``node`` still holds by the lease TTL, atomically.

        Args:
            node: the holder.
            ids: the sessions it believes it holds.

        Returns:
            The ids whose lease was lost (expired, or taken by another node): the
            node must drop those sessions' sandboxes. Every other id was renewed.
        """

    @abstractmethod
    def release_lease(self, session_id: str, node: str) -> bool:
        """Give up the session's lease, only if ``node`` holds it.

        Returns:
            True when it was released; False when ``node`` did not hold it.
        """

    @abstractmethod
    def lease_owner(self, session_id: str) -> str | None:
        """The node holding the session's lease.

        Returns:
            The node's name, or None when the lease is free or expired.
        """

    @abstractmethod
    def heartbeat(
        self,
        node: str,
        ttl: float,
        *,
        incarnation: str = "",
        types: Sequence[str] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "",
        ports_addr: str = "",
    ) -> None:
        """Say that ``node`` is alive for the next ``ttl`` seconds.

        Args:
            node: the node.
            ttl: seconds until it counts as dead; beat every ``ttl / 3``.
            incarnation: the process beating (a restart under the same name
                is a new one).
            types: the sandbox types it serves (the API refuses types no live
                node serves).
            metrics_port: the port of its ``/metrics`` (the API lists the URLs).
            metrics_host: the host name or address that port is reached at.
            ports_addr: ``host:port`` of its port listener (issue 21.1).
        """

    @abstractmethod
    def node_record(self, node: str) -> NodeRecord | None:
        """The heartbeat record of ``node``; None when it has lapsed."""

    @abstractmethod
    def node_records(self) -> dict[str, NodeRecord]:
        """Every live node's heartbeat record, by name (a pause picks the node that
        stages its image among them, ``worker.turns.memory_stage``)."""

    # ---- records -------------------------------------------------------------------

    @abstractmethod
    def get_any(self, session_id: str) -> SessionInfo | None:
        """The session record, whoever its tenant (the worker trusts its job).

        Returns:
            The record with ``owner``, ``lease_expires`` and ``state`` derived
            from the lease and turn lock; None when the session is unknown.
        """

    @abstractmethod
    def update(self, session_id: str, **fields: Any) -> None:
        """Set fields of a session record (``snapshot``, ``unsaved``, ``last_turn``...).

        Args:
            session_id: the session.
            **fields: ``SessionInfo`` fields and their new values; validated.

        Raises:
            ValueError: an unknown, immutable or derived field (``owner`` and
                ``lease_expires`` come from the lease).
            pydantic.ValidationError: a value of the wrong type.
            NotFound: the session record is gone.
        """

    # ---- snapshot collection ---------------------------------------------------------

    @abstractmethod
    def note_gc_tenant(self, tenant: str) -> None:
        """Note that ``tenant`` was served now, so that its snapshots get collected
        for a while, grid-wide (any node collects it, also after a restart)."""

    @abstractmethod
    def gc_tenants(self, since: float) -> list[str]:
        """The tenants served since ``since``.

        Args:
            since: epoch seconds; notes older than this are dropped.

        Returns:
            The tenants' names, sorted.
        """

    @abstractmethod
    def claim_gc(self, tenant: str, interval_s: float) -> bool:
        """Take the right to collect ``tenant``'s snapshots for ``interval_s`` seconds.

        Returns:
            True for one node per interval, grid-wide; False when another node
            (or this one) already collected the tenant in this interval.
        """
