"""The warm pool's bookkeeping with a fake backend: hits, misses, one session each, threads."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from sandgrid.errors import CapacityError, SandboxLost
from sandgrid.models import Quotas
from worker.sandboxes import Sandbox
from worker.sessions.pool import WarmPool


class FakeBackend:
    """Just what the pool uses: create, ping, warm, destroy."""

    def __init__(self) -> None:
        self.ids = itertools.count()
        self.created: list[Sandbox] = []
        self.destroyed: list[str] = []
        self.dead: set[str] = set()
        self.warmed: list[str] = []
        self.lock = threading.Lock()

    def create(self, sandbox_type: str, quotas: Quotas, **kw: Any) -> Sandbox:
        with self.lock:
            sbx = Sandbox(f"c{next(self.ids)}", "n", sandbox_type, "fake", quotas, {})
            self.created.append(sbx)
        return sbx

    def ping(self, sbx: Sandbox, timeout: float = 1.0) -> float:
        if sbx.id in self.dead:
            raise SandboxLost("gone")
        return 0.1

    def warm(self, sbx: Sandbox) -> None:
        self.ping(sbx)
        self.warmed.append(sbx.id)

    def destroy(self, sbx: Sandbox) -> None:
        with self.lock:
            self.destroyed.append(sbx.id)
        sbx.state = "destroyed"


@pytest.fixture
def fake() -> FakeBackend:
    return FakeBackend()


def make_pool(fake: FakeBackend, n: int = 2) -> WarmPool:
    return WarmPool(lambda _t: fake, {"python": n})  # type: ignore[arg-type,return-value]


def test_fill_hit_miss_release(fake: FakeBackend) -> None:
    pool = make_pool(fake)
    pool.fill()
    assert pool.warm_count("python") == 2 and len(fake.created) == 2
    a = pool.acquire("python", session_id="s1", tenant="t")
    b = pool.acquire("python", session_id="s2", tenant="t")
    c = pool.acquire("python", session_id="s3", tenant="t")
    assert len({a.id, b.id, c.id}) == 3 and a.state == "leased" and c.session_id == "s3"
    stats = pool.stats()["python"]
    assert (stats["hits"], stats["misses"], stats["leased"]) == (2, 1, 3)
    assert pool.container_ids() == {a.id, b.id, c.id}
    pool.release(a)
    assert a.state == "destroyed" and a.id in fake.destroyed and a.id not in pool.container_ids()
    pool.close()
    assert set(fake.destroyed) >= {a.id, b.id, c.id}


def test_other_quotas_bypass_the_pool(fake: FakeBackend) -> None:
    pool = make_pool(fake)
    pool.fill()
    sbx = pool.acquire("python", Quotas(memory_mb=999), session_id="s", tenant="t")
    assert sbx.quotas.memory_mb == 999 and pool.warm_count("python") == 2
    pool.close()


def test_dead_warm_sandbox_is_destroyed_not_handed_out(fake: FakeBackend) -> None:
    pool = make_pool(fake)
    pool.fill()
    first = pool._warm.waiting("python")[0]
    fake.dead.add(first.id)
    sbx = pool.acquire("python", session_id="s", tenant="t")
    assert sbx.id != first.id and first.id in fake.destroyed and first.state == "destroyed"
    assert pool.stats()["python"]["unhealthy"] == 1
    pool.close()


def lease_from_threads(pool: WarmPool, each: int, *, release: bool, threads: int = 8) -> list[str]:
    """The ids of the sandboxes ``threads`` threads leased at once, ``each`` per thread
    (each released after its lease when ``release``)."""
    got: list[str] = []
    lock = threading.Lock()

    def lease(i: int) -> None:
        for j in range(each):
            sbx = pool.acquire("python", session_id=f"s{i}-{j}", tenant="t")
            with lock:
                got.append(sbx.id)
            if release:
                pool.release(sbx)

    running = [threading.Thread(target=lease, args=(i,)) for i in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return got


def test_threads_never_share_a_sandbox(fake: FakeBackend) -> None:
    pool = make_pool(fake, n=5)
    pool.start()
    got = lease_from_threads(pool, each=20, release=True)
    assert len(got) == 160 and len(set(got)) == 160
    pool.close()
    assert len(set(fake.destroyed)) == len(fake.created)


def test_closed_pool_refuses(fake: FakeBackend) -> None:
    pool = make_pool(fake)
    pool.close()
    with pytest.raises(CapacityError):
        pool.acquire("python", session_id="s", tenant="t")


def test_every_pooled_sandbox_was_warmed_and_one_that_fails_it_is_not_pooled(
    fake: FakeBackend,
) -> None:
    """Issue 22.3: the pool asks each new sandbox to get ready for its first
    command; one that does not answer is destroyed, not kept."""
    real_create = fake.create

    def dying_first(sandbox_type: str, quotas: Quotas, **kw: Any) -> Sandbox:
        sbx = real_create(sandbox_type, quotas, **kw)
        if sbx.id == "c0":
            fake.dead.add(sbx.id)
        return sbx

    fake.create = dying_first  # type: ignore[method-assign]
    pool = make_pool(fake)
    pool.fill()  # stops at the failure, as a failed create does
    pool.fill()
    assert fake.destroyed[:1] == ["c0"] and "c0" not in fake.warmed
    assert pool.warm_count("python") == 2
    taken = {pool.acquire("python", session_id=f"s{i}", tenant="t").id for i in range(2)}
    assert taken <= set(fake.warmed)


class QuietChannel:
    """A channel whose ``quiet`` the test sets (the real one polls its stream)."""

    def __init__(self, quiet: bool) -> None:
        self.is_quiet = quiet

    def quiet(self) -> bool:
        return self.is_quiet


class CountingBackend(FakeBackend):
    """Gives each sandbox a quiet channel and counts the pings after the warm one."""

    def __init__(self) -> None:
        super().__init__()
        self.pings = 0

    def create(self, sandbox_type: str, quotas: Quotas, **kw: Any) -> Sandbox:
        sbx = super().create(sandbox_type, quotas, **kw)
        sbx.channel = QuietChannel(True)  # type: ignore[assignment]
        return sbx

    def ping(self, sbx: Sandbox, timeout: float = 1.0) -> float:
        self.pings += 1
        return super().ping(sbx, timeout)

    def warm(self, sbx: Sandbox) -> None:
        super().ping(sbx)
        self.warmed.append(sbx.id)


def test_a_recent_answer_on_a_quiet_channel_spares_the_take_its_ping() -> None:
    fake = CountingBackend()
    pool = WarmPool(lambda _t: fake, {"python": 1})  # type: ignore[arg-type,return-value]
    pool.fill()
    sbx = pool.acquire("python", session_id="s1", tenant="t")
    assert fake.pings == 0 and sbx.state == "leased"
    pool.close()


def test_a_channel_that_is_not_quiet_gets_the_ping_and_a_dead_one_is_not_handed_out() -> None:
    fake = CountingBackend()
    pool = WarmPool(lambda _t: fake, {"python": 2})  # type: ignore[arg-type,return-value]
    pool.fill()
    dead = pool._warm.waiting("python")[0]
    dead.channel.is_quiet = False  # type: ignore[union-attr]  # its stream ended
    fake.dead.add(dead.id)
    sbx = pool.acquire("python", session_id="s1", tenant="t")
    assert sbx.id != dead.id and dead.id in fake.destroyed and fake.pings == 1
    assert pool.stats()["python"]["unhealthy"] == 1
    pool.close()


def test_an_old_answer_gets_the_ping() -> None:
    fake = CountingBackend()
    pool = WarmPool(lambda _t: fake, {"python": 1}, trust_s=0.0)  # type: ignore[arg-type,return-value]
    pool.fill()
    pool.acquire("python", session_id="s1", tenant="t")
    assert fake.pings == 1
    pool.close()
