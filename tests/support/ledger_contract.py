"""The contract of ``SessionLedger``: one suite, subclassed once per implementation.

A subclass provides the ``ledger`` fixture (over the test Redis database, which
``redis_client`` flushes). Records and turns are seeded in their wire format
(``sandgrid.wire.names`` keys, JSON fields), as the control plane writes them,
so the suite needs nothing beyond the interface and the wire contract.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest
import redis
from pydantic import ValidationError

from sandgrid.errors import NotFound
from sandgrid.models import Quotas, SessionInfo
from sandgrid.wire import names
from sandgrid.wire.ledger import SessionLedger
from sandgrid.wire.redis_ledger import DERIVED_FIELDS

__all__ = ["LEASE_S", "LedgerContract", "seed_session", "seed_turn"]

#: The lease TTL the ``ledger`` fixtures use.
LEASE_S = 0.5


def seed_session(client: redis.Redis[str], session_id: str, tenant: str = "acme") -> SessionInfo:
    """A session record as ``SessionRegistry.create`` stores it."""
    now = datetime.now(UTC)
    info = SessionInfo(
        id=session_id, tenant=tenant, type="python", quotas=Quotas(), created_at=now, last_used=now
    )
    fields = info.model_dump(mode="json", exclude=set(DERIVED_FIELDS))
    client.hset(
        names.session_key(session_id), mapping={k: json.dumps(v) for k, v in fields.items()}
    )
    return info


def seed_turn(
    client: redis.Redis[str], turn_id: str, state: str = "queued", attempt: int = 1
) -> None:
    """A turn record as ``SessionRegistry.begin_turn`` / ``requeue_turn`` leave it."""
    record = {"state": state, "attempt": attempt, "session": "s-x", "node": ""}
    client.hset(names.turn_key(turn_id), mapping=record)


class LedgerContract:
    """What the worker relies on, whatever implements the ledger."""

    # ---- turns -------------------------------------------------------------------

    def test_a_turn_is_claimed_once(
        self, ledger: SessionLedger, redis_client: redis.Redis[str]
    ) -> None:
        assert ledger.claim_turn("t-none", "w1")  # no record: nothing to guard
        seed_turn(redis_client, "t-1")
        assert ledger.claim_turn("t-1", "w1")
        assert not ledger.claim_turn("t-1", "w2")  # a redelivered message
        assert redis_client.hget(names.turn_key("t-1"), "node") == "w1"

    def test_abandoned_and_stale_attempts_are_refused(
        self, ledger: SessionLedger, redis_client: redis.Redis[str]
    ) -> None:
        seed_turn(redis_client, "t-gone", state="abandoned")
        assert not ledger.claim_turn("t-gone", "w1")
        seed_turn(redis_client, "t-2", attempt=2)
        assert not ledger.claim_turn("t-2", "w1", attempt=1)
        assert ledger.claim_turn("t-2", "w1", attempt=2)

    def test_a_held_turn_names_its_process_and_a_claim_counts_a_run(
        self, ledger: SessionLedger, redis_client: redis.Redis[str]
    ) -> None:
        assert not ledger.receive_turn("t-none", "w1", 1, "a")  # no record: nothing noted
        seed_turn(redis_client, "t-3")
        assert ledger.receive_turn("t-3", "w1", 1, "a")
        assert not ledger.receive_turn("t-3", "w1", 2, "a")  # another attempt's message
        record = redis_client.hgetall(names.turn_key("t-3"))
        assert (record["state"], record["node"], record["inc"]) == ("queued", "w1", "a")
        assert ledger.claim_turn("t-3", "w1", 1, "b")
        record = redis_client.hgetall(names.turn_key("t-3"))
        assert (record["state"], record["inc"], record["runs"]) == ("running", "b", "1")
        assert not ledger.receive_turn("t-3", "w2", 1, "c")  # running: a redelivery

    def test_the_heartbeat_names_incarnation_and_types(self, ledger: SessionLedger) -> None:
        assert ledger.node_record("w1") is None
        ledger.heartbeat("w1", 10, incarnation="a", types=["python", "python-gvisor"])
        record = ledger.node_record("w1")
        assert record is not None and record.inc == "a"
        assert record.types == ("python", "python-gvisor")
        ledger.heartbeat("w1", 10)  # a record that does not say: any type
        record = ledger.node_record("w1")
        assert record is not None and record.types is None and record.inc == ""

    def test_record_turn_counts_and_keeps_the_snapshot(
        self, ledger: SessionLedger, redis_client: redis.Redis[str]
    ) -> None:
        seed_session(redis_client, "s-1")
        ledger.record_turn("s-1", snapshot="snap-1", turn_id="t-1", unsaved=True)
        ledger.record_turn("s-1")
        info = ledger.get_any("s-1")
        assert info is not None
        assert (info.turns, info.snapshot, info.last_turn, info.unsaved) == (
            2,
            "snap-1",
            "t-1",
            False,
        )
        with pytest.raises(NotFound):
            ledger.record_turn("s-missing")

    # ---- leases and heartbeats -----------------------------------------------------

    def test_one_live_node_holds_a_lease(self, ledger: SessionLedger) -> None:
        ledger.heartbeat("w1", 10)
        ledger.heartbeat("w2", 10)
        assert ledger.lease_owner("s-1") is None
        assert ledger.acquire_lease("s-1", "w1")
        assert ledger.acquire_lease("s-1", "w1")  # held: extended
        assert not ledger.acquire_lease("s-1", "w2")
        assert ledger.lease_owner("s-1") == "w1"
        assert not ledger.release_lease("s-1", "w2")  # not the holder
        assert ledger.release_lease("s-1", "w1")
        assert ledger.lease_owner("s-1") is None
        assert ledger.acquire_lease("s-1", "w2")

    def test_renew_reports_the_leases_lost(self, ledger: SessionLedger) -> None:
        ledger.heartbeat("w1", 10)
        ledger.heartbeat("w2", 10)
        assert ledger.renew_leases("w1", []) == []
        assert ledger.acquire_lease("s-1", "w1") and ledger.acquire_lease("s-2", "w2")
        assert ledger.renew_leases("w1", ["s-1", "s-2", "s-3"]) == ["s-2", "s-3"]
        time.sleep(LEASE_S * 0.6)
        assert ledger.renew_leases("w1", ["s-1"]) == []
        time.sleep(LEASE_S * 0.6)
        assert ledger.lease_owner("s-1") == "w1"  # renewed: outlived its first TTL

    def test_a_lease_expires_and_a_dead_nodes_lease_is_taken(self, ledger: SessionLedger) -> None:
        ledger.heartbeat("w1", 0.2)
        ledger.heartbeat("w2", 10)
        assert ledger.acquire_lease("s-1", "w1")
        assert not ledger.acquire_lease("s-1", "w2")
        time.sleep(0.3)  # w1's heartbeat lapsed, its lease not yet
        assert ledger.acquire_lease("s-1", "w2")
        assert ledger.lease_owner("s-1") == "w2"
        assert ledger.acquire_lease("s-2", "w2")
        time.sleep(LEASE_S + 0.1)
        assert ledger.lease_owner("s-2") is None
        assert ledger.renew_leases("w2", ["s-2"]) == ["s-2"]

    def test_a_lease_race_has_one_winner(self, ledger: SessionLedger) -> None:
        nodes = [f"w{n}" for n in range(8)]
        for node in nodes:
            ledger.heartbeat(node, 10)
        won: list[str] = []
        start = threading.Barrier(len(nodes))

        def take(node: str) -> None:
            start.wait()
            if ledger.acquire_lease("s-1", node):
                won.append(node)

        threads = [threading.Thread(target=take, args=(n,)) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and ledger.lease_owner("s-1") == won[0]

    # ---- records -------------------------------------------------------------------

    def test_get_any_derives_owner_and_state_from_the_lease(
        self, ledger: SessionLedger, redis_client: redis.Redis[str]
    ) -> None:
        assert ledger.get_any("s-missing") is None
        seeded = seed_session(redis_client, "s-1", tenant="other")
        info = ledger.get_any("s-1")
        assert info is not None and info.tenant == "other" and info.id == seeded.id
        assert (info.state, info.owner, info.lease_expires) == ("new", None, None)
        ledger.heartbeat("w1", 10)
        assert ledger.acquire_lease("s-1", "w1")
        info = ledger.get_any("s-1")
        assert info is not None and info.state == "live" and info.owner == "w1"
        assert info.lease_expires is not None and info.lease_expires > time.time()

    def test_update_validates_and_never_recreates(
        self, ledger: SessionLedger, redis_client: redis.Redis[str]
    ) -> None:
        seed_session(redis_client, "s-1")
        ledger.update("s-1", snapshot="snap-9", unsaved=True)
        info = ledger.get_any("s-1")
        assert info is not None and info.snapshot == "snap-9" and info.unsaved
        for field in ("tenant", "owner", "nonsense"):
            with pytest.raises(ValueError, match=field):
                ledger.update("s-1", **{field: "x"})
        with pytest.raises(ValidationError):
            ledger.update("s-1", turns="many")
        with pytest.raises(NotFound):
            ledger.update("s-missing", snapshot="snap-1")
        assert not redis_client.exists(names.session_key("s-missing"))

    # ---- snapshot collection ---------------------------------------------------------

    def test_gc_notes_and_claims(self, ledger: SessionLedger) -> None:
        before = time.time()
        ledger.note_gc_tenant("b")
        ledger.note_gc_tenant("a")
        assert ledger.gc_tenants(before - 1) == ["a", "b"]
        assert ledger.gc_tenants(time.time() + 1) == []  # too old: dropped
        assert ledger.gc_tenants(0) == []
        assert ledger.claim_gc("a", 0.2)
        assert not ledger.claim_gc("a", 0.2)  # one node per interval
        assert ledger.claim_gc("b", 0.2)
        time.sleep(0.3)
        assert ledger.claim_gc("a", 0.2)
