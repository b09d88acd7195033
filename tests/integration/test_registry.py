"""The session registry against the real Redis: records, leases, turn locks."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from pydantic import ValidationError

from sandgrid.errors import LimitExceeded, NotFound
from sandgrid.models import Quotas, SessionCreate
from sandgrid.wire import names
from scheduler.registry.sessions import SessionRegistry

pytestmark = pytest.mark.integration

LEASE_S = 0.4


@pytest.fixture
def reg(redis_client: redis.Redis[str]) -> SessionRegistry:
    return SessionRegistry(redis_client, lease_ttl_s=LEASE_S, closed_ttl_s=60)


def test_create_get_list_update_close(reg: SessionRegistry) -> None:
    a = reg.create("acme", SessionCreate(quotas=Quotas(cpus=2), labels={"k": "v"}))
    b = reg.create("acme", SessionCreate())
    assert a.id != b.id and len(a.id) >= 34 and a.id.startswith("s-")
    got = reg.get("acme", a.id)
    assert got.quotas.cpus == 2 and got.labels == {"k": "v"} and got.state == "new"
    assert [s.id for s in reg.list("acme")] == [a.id, b.id]
    reg.update(a.id, snapshot="snap-1", state="idle")
    assert reg.get_any(a.id).snapshot == "snap-1"  # type: ignore[union-attr]
    reg.ledger.record_turn(a.id, snapshot="snap-2")
    after = reg.get("acme", a.id)
    assert after.turns == 1 and after.snapshot == "snap-2" and after.last_used > a.last_used
    reg.close(a.id)
    assert reg.get("acme", a.id).state == "closed"
    assert [s.id for s in reg.list("acme")] == [b.id]
    assert reg.count("acme") == 1
    assert 0 < reg.redis.ttl(names.session_key(a.id)) <= 60


def test_tenants_cannot_see_each_other(reg: SessionRegistry) -> None:
    a = reg.create("acme", SessionCreate())
    with pytest.raises(NotFound) as theirs:
        reg.get("globex", a.id)
    with pytest.raises(NotFound) as unknown:
        reg.get("globex", "s-" + "z" * 32)
    assert theirs.value.message.replace(a.id, "X") == unknown.value.message.replace(
        "s-" + "z" * 32, "X"
    )
    assert reg.list("globex") == []
    assert reg.get_any(a.id) is not None


def test_update_refuses_bad_fields_and_missing_sessions(reg: SessionRegistry) -> None:
    a = reg.create("acme", SessionCreate())
    for field in ("tenant", "id", "owner", "nope"):
        with pytest.raises(ValueError, match=field):
            reg.update(a.id, **{field: "x"})
    with pytest.raises(ValidationError):
        reg.update(a.id, turns="many")
    with pytest.raises(NotFound):
        reg.update("s-" + "q" * 32, snapshot="x")
    assert not reg.redis.exists(names.session_key("s-" + "q" * 32))


def test_session_ceiling_is_atomic(reg: SessionRegistry) -> None:
    errors: list[Exception] = []

    def create() -> None:
        try:
            reg.create("acme", SessionCreate(), max_sessions=5)
        except LimitExceeded as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reg.count("acme") == 5 and len(errors) == 15


def test_lease_acquire_renew_release(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    reg.ledger.heartbeat("w1", 10)
    reg.ledger.heartbeat("w2", 10)
    assert reg.ledger.acquire_lease(sid, "w1")
    assert reg.ledger.acquire_lease(sid, "w1")  # ours already: extended
    assert not reg.ledger.acquire_lease(sid, "w2")  # w1 is alive
    assert reg.lease_owner(sid) == "w1"
    info = reg.get("acme", sid)
    assert info.owner == "w1" and info.state == "live"
    assert info.lease_expires is not None and info.lease_expires > time.time()
    assert reg.ledger.renew_leases("w1", [sid]) == []
    assert reg.ledger.renew_leases("w2", [sid]) == [sid]  # not w2's: reported lost
    assert not reg.ledger.release_lease(sid, "w2")
    assert reg.ledger.release_lease(sid, "w1")
    assert reg.lease_owner(sid) is None
    assert reg.ledger.acquire_lease(sid, "w2")


def test_lease_expires(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    reg.ledger.heartbeat("w1", 10)
    reg.ledger.heartbeat("w2", 10)
    assert reg.ledger.acquire_lease(sid, "w1")
    time.sleep(LEASE_S / 2)
    assert reg.ledger.renew_leases("w1", [sid]) == []
    time.sleep(LEASE_S / 2 + 0.05)
    assert reg.lease_owner(sid) == "w1"  # renewed, still held
    time.sleep(LEASE_S + 0.05)
    assert reg.lease_owner(sid) is None
    assert reg.get("acme", sid).owner is None
    assert reg.ledger.renew_leases("w1", [sid]) == [sid]
    assert reg.ledger.acquire_lease(sid, "w2")


def test_lease_of_a_dead_node_can_be_taken(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    reg.ledger.lease_ttl_s = 30
    reg.ledger.heartbeat("w1", 0.2)
    assert reg.ledger.acquire_lease(sid, "w1")
    assert not reg.ledger.acquire_lease(sid, "w2")
    time.sleep(0.3)
    assert not reg.node_alive("w1")
    assert reg.ledger.acquire_lease(sid, "w2")
    assert reg.lease_owner(sid) == "w2"
    assert reg.ledger.renew_leases("w1", [sid]) == [sid]


def test_lease_race_has_one_winner(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    for n in range(8):
        reg.ledger.heartbeat(f"w{n}", 10)
    wins: list[str] = []
    barrier = threading.Barrier(8)

    def take(node: str) -> None:
        barrier.wait()
        if reg.ledger.acquire_lease(sid, node):
            wins.append(node)

    threads = [threading.Thread(target=take, args=(f"w{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and reg.lease_owner(sid) == wins[0]


def test_heartbeats(reg: SessionRegistry) -> None:
    reg.ledger.heartbeat("w1", 0.2)
    reg.ledger.heartbeat("w2", 10)
    assert reg.node_alive("w1") and reg.live_nodes() == ["w1", "w2"]
    time.sleep(0.3)
    assert not reg.node_alive("w1") and reg.live_nodes() == ["w2"]


def test_turn_lock(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    assert reg.begin_turn(sid, "t-1", 5)
    assert not reg.begin_turn(sid, "t-2", 5)
    assert reg.get("acme", sid).state == "busy"
    assert not reg.end_turn(sid, "t-2")  # not the holder: lock stays
    assert not reg.begin_turn(sid, "t-2", 5)
    assert reg.end_turn(sid, "t-1")
    assert reg.turn_state("t-1")["state"] == "done"
    assert reg.begin_turn(sid, "t-2", 0.2)
    time.sleep(0.3)  # a crashed API process cannot hold a session forever
    assert reg.begin_turn(sid, "t-3", 5)


def test_turn_claims(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    assert reg.begin_turn(sid, "t-1", 5)
    assert not reg.ledger.claim_turn("t-1", "w1", attempt=2)
    assert reg.ledger.claim_turn("t-1", "w1")
    assert reg.turn_state("t-1")["node"] == "w1"
    assert not reg.ledger.claim_turn("t-1", "w2")  # a redelivery never runs twice
    assert reg.begin_turn(sid, "t-2", 5) is False
    reg.end_turn(sid, "t-1")
    assert reg.begin_turn(sid, "t-2", 5)
    assert reg.abandon_turn("t-2")
    assert not reg.ledger.claim_turn("t-2", "w1")
    reg.end_turn(sid, "t-2")
    assert reg.turn_state("t-2")["state"] == "abandoned"
    assert reg.ledger.claim_turn("t-unrecorded", "w1")


def test_concurrent_turns_never_overlap(reg: SessionRegistry) -> None:
    sid = reg.create("acme", SessionCreate()).id
    inside = 0
    overlaps = 0
    lock = threading.Lock()

    def turn(n: int) -> None:
        nonlocal inside, overlaps
        for i in range(30):
            tid = f"t-{n}-{i}"
            if reg.begin_turn(sid, tid, 5):
                with lock:
                    inside += 1
                    overlaps += inside > 1
                time.sleep(0.001)
                with lock:
                    inside -= 1
                reg.end_turn(sid, tid)

    threads = [threading.Thread(target=turn, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == 0
