"""What a worker node asks of the session registry: the ledger of leases and turns.

The registry lives in Redis and belongs to the control plane, but a worker must
take and renew leases, claim turns, record them and keep session records up to
date. This interface is that part of the contract, and nothing more: the worker
depends on it (never on ``scheduler``), ``RedisLedger``
(``sandgrid.wire.redis_ledger``) implements it once, and the scheduler's
``SessionRegistry`` builds its control-plane operations on that implementation.

Operations, by who they protect:
    * turns: ``claim_turn`` (a turn runs at most once), ``record_turn``.
    * leases: ``acquire_lease``, ``renew_leases``, ``release_lease``,
      ``lease_owner`` (one node holds a session at a time), ``heartbeat`` (a
      dead node's leases can be taken).
    * records: ``get_any``, ``update``.
    * snapshot collection: ``note_gc_tenant``, ``gc_tenants``, ``claim_gc``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from sandgrid.models import SessionInfo

__all__ = ["SessionLedger"]


class SessionLedger(ABC):
    """The registry operations of the data plane (see the module doc)."""

    # ---- turns -------------------------------------------------------------------

    @abstractmethod
    def claim_turn(self, turn_id: str, node: str, attempt: int = 1) -> bool:
        """Before running a turn: move its record from queued to running, atomically.

        Args:
            turn_id: the turn.
            node: the node that is about to run it.
            attempt: the attempt this message carries; an older one is refused.

        Returns:
            True when the turn may run (also when no record exists: nothing to
            guard). False when it was abandoned by the API, is already running or
            done (a redelivered message), or the attempt is stale: do not run it.
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
    def heartbeat(self, node: str, ttl: float) -> None:
        """Say that ``node`` is alive for the next ``ttl`` seconds.

        Args:
            node: the node.
            ttl: seconds until it counts as dead; beat every ``ttl / 3``.
        """

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
