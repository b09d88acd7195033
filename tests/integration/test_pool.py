"""The warm pool against the real runtimes: hits, refill, health checks, one session each."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sandgrid.models import ExecRequest, Quotas
from worker.ops.exec import exec_command
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.pool import WarmPool

pytestmark = pytest.mark.integration


@pytest.fixture
def pool(backend: SandboxManager) -> Iterator[WarmPool]:
    p = WarmPool(backend, {"python": 2}, refill_retry_s=0.2)
    yield p
    p.close()


def gone(docker_client: Any, sbx: Sandbox) -> bool:
    return not docker_client.api.containers(all=True, filters={"id": sbx.id})


def test_hit_lease_and_release(pool: WarmPool, backend: SandboxManager, docker_client: Any) -> None:
    pool.fill()
    assert pool.stats()["python"]["warm"] == 2
    t0 = time.perf_counter()
    sbx = pool.acquire("python", session_id="s-aaaaaaaaaaaaaaaa", tenant="t1")
    first = exec_command(backend, sbx, ExecRequest(argv=["true"]))
    elapsed_ms = (time.perf_counter() - t0) * 1000
    assert first.exit_code == 0 and elapsed_ms < 500  # no cold create on the way
    assert (sbx.state, sbx.session_id, sbx.tenant) == ("leased", "s-aaaaaaaaaaaaaaaa", "t1")
    stats = pool.stats()["python"]
    assert (stats["hits"], stats["misses"], stats["leased"]) == (1, 0, 1)
    pool.release(sbx)
    assert sbx.state == "destroyed" and gone(docker_client, sbx)
    pool.release(sbx)  # idempotent


def test_never_handed_out_twice(pool: WarmPool, backend: SandboxManager) -> None:
    pool.fill()
    got: list[Sandbox] = []
    lock = threading.Lock()

    def take(i: int) -> None:
        sbx = pool.acquire("python", session_id=f"s-{i:016d}", tenant="t")
        with lock:
            got.append(sbx)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({s.id for s in got}) == 3  # two warm, one created on the spot
    assert pool.stats()["python"]["hits"] + pool.stats()["python"]["misses"] == 3
    for sbx in got:
        pool.release(sbx)
    again = pool.acquire("python", session_id="s-again00000000000", tenant="t")
    assert again.id not in {s.id for s in got}
    pool.release(again)


def test_refill_thread(pool: WarmPool) -> None:
    pool.start()
    deadline = time.monotonic() + 20
    while pool.stats()["python"]["warm"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.stats()["python"]["warm"] == 2
    sbx = pool.acquire("python", session_id="s-refill0000000000", tenant="t")
    while pool.stats()["python"]["warm"] < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.stats()["python"]["warm"] == 2
    pool.release(sbx)


def test_unhealthy_warm_container_is_skipped(pool: WarmPool, docker_client: Any) -> None:
    pool.fill()
    victim = pool._warm.waiting("python")[0]
    docker_client.api.kill(victim.id)
    sbx = pool.acquire("python", session_id="s-healthy000000000", tenant="t")
    assert sbx.id != victim.id and victim.state in ("lost", "destroyed")
    assert pool.stats()["python"]["unhealthy"] == 1
    pool.release(sbx)


def test_a_fresh_warm_take_needs_no_ping_and_a_killed_one_is_still_caught(
    pool: WarmPool, backend: SandboxManager, docker_client: Any, monkeypatch: Any
) -> None:
    """Issue 22.3: the take trusts a recent warm answer on a quiet channel (one poll),
    and a container killed just before the take has already closed its stream."""
    pool.fill()
    pings: list[str] = []
    real_ping = backend.ping
    monkeypatch.setattr(
        backend, "ping", lambda sbx, **kw: pings.append(sbx.id) or real_ping(sbx, **kw)
    )
    sbx = pool.acquire("python", session_id="s-nopingaaaaaaaaa", tenant="t")
    assert pings == [] and exec_command(backend, sbx, ExecRequest(argv=["true"])).exit_code == 0
    victim = pool._warm.waiting("python")[0]
    docker_client.api.kill(victim.id)
    other = pool.acquire("python", session_id="s-nopingbbbbbbbbb", tenant="t")
    assert other.id != victim.id and pings == [victim.id]
    assert exec_command(backend, other, ExecRequest(argv=["true"])).exit_code == 0
    pool.release(sbx)
    pool.release(other)


def test_other_quotas_are_created_cold_and_labelled(
    pool: WarmPool, backend: SandboxManager, docker_client: Any
) -> None:
    sbx = pool.acquire("python", Quotas(memory_mb=300), session_id="s-cold00000000000", tenant="t9")
    labels = backend.inspect(sbx)["labels"]
    assert labels["sandgrid.session"] == "s-cold00000000000" and labels["sandgrid.tenant"] == "t9"
    assert pool.stats()["python"]["misses"] == 1
    pool.release(sbx)


def test_close_destroys_everything(backend: SandboxManager, docker_client: Any) -> None:
    pool = WarmPool(backend, {"python": 1})
    pool.fill()
    leased = pool.acquire("python", session_id="s-close00000000000", tenant="t")
    pool.fill()
    warm = pool._warm.waiting("python")
    pool.close()
    assert all(gone(docker_client, s) for s in [leased, *warm])
    with pytest.raises(Exception, match="closed"):
        pool.acquire("python", session_id="s-closed0000000000", tenant="t")


def test_a_burst_raises_the_pool_to_its_ceiling_and_no_further(backend: SandboxManager) -> None:
    """22.3: demand, not a fixed size: a burst of 5 with floor 1 and ceiling 3."""
    pool = WarmPool(backend, {"python": 1}, ceiling=3)
    try:
        pool.fill()
        got = [pool.acquire("python", session_id=f"s-burst{i:011d}", tenant="t") for i in range(5)]
        assert pool.target("python") == 3
        pool.fill()
        assert pool.warm_count("python") == 3
        pool.fill()
        assert pool.warm_count("python") == 3 and len({s.id for s in got}) == 5
        for sbx in got:
            pool.release(sbx)
    finally:
        pool.close()


def test_the_node_cap_holds_on_the_runtime(backend: SandboxManager, docker_client: Any) -> None:
    capped = WarmPool(backend, {"python": 3}, refill_retry_s=0.2, total=2)
    try:
        capped.start()
        deadline = time.monotonic() + 30
        while capped.stats()["python"]["warm"] < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # a third would have been started by now
        assert capped.stats()["python"]["warm"] == 2 and capped.stats()["python"]["creating"] == 0
        running = [
            i for i in capped.container_ids() if docker_client.api.containers(filters={"id": i})
        ]
        assert len(running) == 2
    finally:
        capped.close()
