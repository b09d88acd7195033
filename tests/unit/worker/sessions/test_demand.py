"""The pool's target from observed demand (22.3): the rule, then the pool reaching and
holding it, its ceiling under a burst and its decay to the floor, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from sandgrid.models import Quotas
from tests.unit.worker.sessions.test_pool_unit import FakeBackend, lease_from_threads
from worker.sandboxes import Sandbox
from worker.sessions.demand import DEFAULT_REFILL_S, Demand, next_to_fill
from worker.sessions.pool import WarmPool

REFILL_S = 0.2


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SlowBackend(FakeBackend):
    """A create takes ``REFILL_S`` of the fake clock."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    def create(self, sandbox_type: str, quotas: Quotas, **kw: Any) -> Sandbox:
        with self.lock:
            self.clock.advance(REFILL_S)
        return super().create(sandbox_type, quotas, **kw)


def measured(clock: Clock, window_s: float = 60.0) -> Demand:
    demand = Demand(window_s, clock)
    demand.created("python", REFILL_S)
    return demand


def test_no_demand_is_the_floor_and_floor_zero_keeps_none() -> None:
    clock = Clock()
    demand = measured(clock)
    assert demand.target("python", 2, 8) == 2
    for _ in range(20):
        demand.took("python")
    assert demand.target("python", 0, 8) == 0  # a stopped type keeps none, whatever its demand


def test_a_burst_within_one_refill_asks_for_as_many_up_to_the_ceiling() -> None:
    clock = Clock()
    demand = measured(clock)
    for _ in range(5):
        demand.took("python")
        clock.advance(0.01)
    assert demand.target("python", 1, 8) == 5
    for _ in range(50):
        demand.took("python")
    assert demand.target("python", 1, 8) == 8
    assert demand.target("python", 3, 2) == 3  # a floor above the ceiling is its own ceiling


def test_a_steady_rate_asks_for_the_takes_of_one_refill() -> None:
    clock = Clock()
    demand = measured(clock)
    for _ in range(500):  # one each 0.06 s for 30 s, a refill of 0.2 s: 4 per refill
        demand.took("python")
        clock.advance(0.06)
    assert demand.target("python", 1, 8) == 4
    assert demand.target("other", 1, 8) == 1  # per type


def test_demand_holds_while_the_burst_is_in_the_window_then_falls_to_the_floor() -> None:
    clock = Clock()
    demand = measured(clock, window_s=30.0)
    for _ in range(6):
        demand.took("python")
    seen = []
    for _ in range(40):
        clock.advance(1.0)
        seen.append(demand.target("python", 1, 8))
    assert seen[:30] == [6] * 30 and seen[30:] == [1] * 10
    assert demand.expected("python") == 0


def test_the_time_misses_spent_creating_hides_no_demand() -> None:
    clock = Clock()
    demand = measured(clock)
    for _ in range(5):  # one client, one session after another, each a cold create
        demand.took("python")
        start = clock()
        clock.advance(REFILL_S)
        demand.missed("python", start, clock())
    assert demand.target("python", 1, 8) == 5
    demand.created("other", REFILL_S)
    for _ in range(5):  # the same takes, with pauses of the client's own between them
        demand.took("other")
        clock.advance(REFILL_S)
    assert demand.target("other", 1, 8) == 1


def test_the_create_ready_time_is_a_moving_average() -> None:
    demand = Demand(60.0, Clock())
    assert demand.refill_s("python") == DEFAULT_REFILL_S
    demand.created("python", 1.0)
    assert demand.refill_s("python") == 1.0
    demand.created("python", 0.0)
    assert 0.0 < demand.refill_s("python") < 1.0
    with pytest.raises(ValueError, match="window_s"):
        Demand(0)


def make_pool(clock: Clock, backend: FakeBackend, ceiling: int = 4) -> WarmPool:
    return WarmPool(
        lambda _t: backend,  # type: ignore[arg-type,return-value]
        {"python": 1},
        ceiling=ceiling,
        window_s=30.0,
        clock=clock,
    )


def burst(pool: WarmPool, n: int, tag: str) -> list[Sandbox]:
    return [pool.acquire("python", session_id=f"s-{tag}{i}", tenant="t") for i in range(n)]


def test_the_pool_reaches_its_target_holds_its_ceiling_and_decays() -> None:
    clock = Clock()
    backend = SlowBackend(clock)
    pool = make_pool(clock, backend)
    pool.fill()
    assert pool.warm_count("python") == 1 and pool.target("python") == 1
    first = burst(pool, 8, "a")  # one hit, then cold creates: demand of 8, ceiling 4
    assert pool.stats()["python"]["hits"] == 1 and pool.target("python") == 4
    pool.fill()
    assert pool.warm_count("python") == 4
    pool.fill()  # held: no more than the ceiling
    assert pool.warm_count("python") == 4 and pool.stats()["python"]["target"] == 4
    second = burst(pool, 4, "b")
    assert pool.stats()["python"]["hits"] == 5
    assert len({s.id for s in first + second}) == 12
    clock.advance(31.0)  # the takes left the window
    assert pool.target("python") == 1
    pool.fill()
    assert pool.warm_count("python") == 1 and pool.trim() == 0
    pool.close()


def test_surplus_warm_sandboxes_are_trimmed_as_demand_falls() -> None:
    clock = Clock()
    backend = SlowBackend(clock)
    pool = make_pool(clock, backend)
    burst(pool, 6, "a")
    pool.fill()
    assert pool.warm_count("python") == 4
    clock.advance(31.0)
    assert pool.trim() == 3 and pool.warm_count("python") == 1
    assert len(backend.destroyed) == 3
    pool.set_target("python", 0)  # the type stopped: none kept, demand or not
    burst(pool, 3, "b")
    pool.fill()
    assert pool.warm_count("python") == 0 and pool.target("python") == 0
    pool.close()


def test_creates_with_other_quotas_are_no_demand_for_the_warm_pool() -> None:
    clock = Clock()
    pool = make_pool(clock, SlowBackend(clock))
    for i in range(6):
        pool.acquire("python", Quotas(memory_mb=999), session_id=f"s-q{i}", tenant="t")
    pool.fill()
    assert pool.target("python") == 1 and pool.warm_count("python") == 1
    pool.close()


def test_a_fixed_pool_without_a_ceiling_stays_at_its_floor() -> None:
    clock = Clock()
    pool = make_pool(clock, SlowBackend(clock), ceiling=0)
    burst(pool, 8, "a")
    pool.fill()
    assert pool.warm_count("python") == 1 and pool.target("python") == 1
    pool.close()


def test_a_threaded_burst_never_shares_a_sandbox_nor_passes_the_ceiling() -> None:
    clock = Clock()  # still: every take at one instant, a burst far above the ceiling
    backend = FakeBackend()
    pool = make_pool(clock, backend, ceiling=3)
    most = [0]
    keep = pool._refill_one

    def refill_and_watch(sandbox_type: str) -> bool:
        ok = keep(sandbox_type)
        most[0] = max(most[0], pool.warm_count(sandbox_type))
        return ok

    pool._refill_one = refill_and_watch  # type: ignore[method-assign]
    pool.start()
    got = lease_from_threads(pool, each=10, release=False)
    pool.fill()
    assert len(got) == 80 and len(set(got)) == 80
    assert pool.warm_count("python") == 3 and most[0] <= 3
    pool.close()
    assert len(set(backend.destroyed)) == len(backend.created)


def test_floors_are_filled_before_demand_and_the_node_cap_bounds_all() -> None:
    floors = {"python": 1, "node": 2}
    targets = {"python": 8, "node": 2}
    assert next_to_fill({"python": 3, "node": 0}, floors, targets, 0) == "node"
    assert next_to_fill({"python": 3, "node": 2}, floors, targets, 0) == "python"
    assert next_to_fill({"python": 8, "node": 2}, floors, targets, 0) is None
    assert next_to_fill({"python": 3, "node": 1}, floors, targets, 4) is None  # at the cap
    assert next_to_fill({"python": 3, "node": 0}, floors, targets, 4) == "node"


def test_the_node_cap_holds_across_types_under_demand() -> None:
    clock = Clock()
    backend = SlowBackend(clock)
    pool = WarmPool(
        lambda _t: backend,  # type: ignore[arg-type,return-value]
        {"python": 1, "node": 1, "browser": 1},
        ceiling=8,
        total=5,
        window_s=30.0,
        clock=clock,
    )
    for t in ("python", "node"):  # demand of 8 on two types: 16 asked, 5 allowed
        for i in range(8):
            pool.acquire(t, session_id=f"s-{t}{i}", tenant="t")
    assert pool.target("python") == 8 and pool.target("node") == 8
    pool.fill()
    warm = {t: pool.warm_count(t) for t in ("python", "node", "browser")}
    assert sum(warm.values()) == 5
    assert warm["browser"] == 1  # its floor came first, though it had no demand
    pool.close()
