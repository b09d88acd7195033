"""After the container runtime restarts: sessions and warm sandboxes whose
container no longer runs are dropped; the pool refills; orphans are removed."""

from __future__ import annotations

import itertools
import threading
from typing import Any, cast

import pytest

from sandgrid.errors import SandgridError
from sandgrid.models import Quotas
from worker.reaper import Reaper
from worker.sandboxes import Sandbox, SandboxManager
from worker.sessions.pool import WarmPool
from worker.sessions.table import LocalSession, SessionTable
from worker.turns.residency import Residency
from worker.turns.snapshot_policy import Persistence


class VanishingBackend:
    """Containers that the "daemon" may stop all at once (``restart``)."""

    def __init__(self) -> None:
        self.ids = itertools.count()
        self.running: set[str] = set()
        self.exited: set[str] = set()
        self.down = False

    def create(self, sandbox_type: str, quotas: Quotas, **kw: Any) -> Sandbox:
        sbx = Sandbox(f"c{next(self.ids)}", "n", sandbox_type, "fake", quotas, {})
        self.running.add(sbx.id)
        return sbx

    def ping(self, sbx: Sandbox, timeout: float = 1.0) -> float:
        return 0.1

    def warm(self, sbx: Sandbox) -> None:
        pass

    def destroy(self, sbx: Sandbox) -> None:
        self.remove_container(sbx.id)
        sbx.state = "destroyed"

    def remove_container(self, container_id: str) -> None:
        self.running.discard(container_id)
        self.exited.discard(container_id)

    def list_managed(self, node: str | None = None) -> list[dict[str, Any]]:
        if self.down:
            raise SandgridError("the Docker daemon does not answer")
        rows = [{"id": i, "running": True, "created": 0.0} for i in self.running]
        return rows + [{"id": i, "running": False, "created": 0.0} for i in self.exited]

    def restart(self) -> None:
        self.exited |= self.running
        self.running = set()


class Discarder:
    """The residency's ``discard``: forget the session, destroy its sandbox."""

    def __init__(self, sessions: SessionTable, pool: WarmPool) -> None:
        self.sessions, self.pool, self.discarded = sessions, pool, []  # type: ignore[var-annotated]

    def discard(self, local: LocalSession) -> None:
        self.sessions.pop(local.session_id)
        self.pool.discard(local.sandbox)
        self.discarded.append(local.session_id)


def _node(backend: VanishingBackend) -> tuple[Reaper, SessionTable, WarmPool, Discarder]:
    pool = WarmPool(lambda _t: backend, {"python": 2})  # type: ignore[arg-type,return-value]
    pool.fill()
    sessions = SessionTable()
    residency = Discarder(sessions, pool)
    reaper = Reaper(
        "n",
        sessions,
        pool,
        lambda: [cast(SandboxManager, backend)],
        cast(Residency, residency),
        cast(Persistence, None),
        idle_ttl_s=60,
    )
    return reaper, sessions, pool, residency


def _lease(sessions: SessionTable, pool: WarmPool, sid: str) -> LocalSession:
    sbx = pool.acquire("python", session_id=sid, tenant="t")
    local = LocalSession(session_id=sid, tenant="t", sandbox_type="python", sandbox=sbx)
    sessions.put(local)
    return local


def test_nothing_is_dropped_while_containers_run() -> None:
    backend = VanishingBackend()
    reaper, sessions, pool, residency = _node(backend)
    _lease(sessions, pool, "s1")
    assert reaper.reconcile() == 0 and sessions.ids() == ["s1"] and residency.discarded == []


def test_after_a_restart_sessions_and_warm_sandboxes_are_dropped_and_nothing_is_left() -> None:
    backend = VanishingBackend()
    reaper, sessions, pool, residency = _node(backend)
    _lease(sessions, pool, "s1")
    pool.fill()
    backend.restart()
    assert reaper.reconcile() == 3  # one session, two warm sandboxes
    assert sessions.ids() == [] and residency.discarded == ["s1"]
    assert pool.warm_count("python") == 0 and pool.stats()["python"]["unhealthy"] == 2
    assert backend.exited == set()  # every exited container was removed
    pool.fill()
    assert pool.warm_count("python") == 2 and backend.running == pool.container_ids()
    assert reaper.collect_orphans() == 0


def test_a_session_in_a_turn_is_left_to_its_turn() -> None:
    backend = VanishingBackend()
    reaper, sessions, pool, residency = _node(backend)
    local = _lease(sessions, pool, "s1")
    backend.restart()
    with local.gate.turn():
        reaper.reconcile()
    assert sessions.ids() == ["s1"] and residency.discarded == []
    assert reaper.reconcile() >= 1 and sessions.ids() == []


def test_a_daemon_that_does_not_answer_drops_nothing() -> None:
    backend = VanishingBackend()
    reaper, sessions, pool, _ = _node(backend)
    _lease(sessions, pool, "s1")
    warm = pool.warm_count("python")
    backend.down = True
    with pytest.raises(SandgridError):  # the reaper's loop logs it and tries again
        reaper.reconcile()
    assert sessions.ids() == ["s1"] and pool.warm_count("python") == warm


def test_a_container_made_during_the_pass_is_not_judged() -> None:
    backend = VanishingBackend()
    reaper, sessions, pool, _ = _node(backend)
    listed = threading.Event()
    real = backend.list_managed

    def list_then_create(node: str | None = None) -> list[dict[str, Any]]:
        rows = real(node)
        if not listed.is_set():
            listed.set()
            _lease(sessions, pool, "late")  # created after the listing
        return rows

    backend.list_managed = list_then_create  # type: ignore[method-assign]
    reaper.reconcile()
    assert "late" in sessions.ids()


def test_a_backend_the_node_makes_later_is_listed_by_its_reaper(
    redis_client: Any, tmp_path: Any
) -> None:
    """25.3: a node whose ``--types`` pattern matched nothing at start makes a runtime's
    backend when a type of it is added; its reaper lists that backend's containers too,
    so the type's warm sandboxes are not taken for gone at every pass."""
    from types import SimpleNamespace

    from sandgrid.wire import catalog
    from sandgrid.wire.catalog import CatalogView
    from sandgrid.wire.objects.local import LocalObjects
    from sandgrid.wire.redis_ledger import RedisLedger
    from sandgrid.wire.settings import Settings, WorkerSettings
    from tests.unit.worker.serving.test_serving import Source, _spec
    from worker.node import Node
    from worker.snapshots import SnapshotStore

    backend = VanishingBackend()
    backend.runtime = "runc"  # type: ignore[attr-defined]
    backend.images = None  # type: ignore[attr-defined]
    backend.engine = SimpleNamespace(has_image=lambda image: True, available=lambda: True)  # type: ignore[attr-defined]
    source = Source(_spec("python"))
    view = CatalogView(source, cache_s=0)
    catalog.install(view)
    node = Node(
        "n",
        ["late-*"],  # no type of the catalog yet: no backend at start
        Settings(worker=WorkerSettings(pool_size=0)),
        RedisLedger(redis_client),
        SnapshotStore(LocalObjects(tmp_path)),
        backends={},
    )
    node._own_backends = True  # as a node that makes its own, made here without Docker
    node._new_backend = lambda runtime: cast(SandboxManager, backend)  # type: ignore[method-assign]
    try:
        source.set(_spec("python"), _spec("late-one", pool_size=1))
        node.watch_catalog(view).sync()
        node.pool.fill()  # type: ignore[attr-defined]
        warm = node.pool.container_ids()
        assert len(warm) == 1
        for _ in range(3):  # reaper passes
            assert node.reaper.reconcile() == 0
        assert node.pool.container_ids() == warm
    finally:
        node.pool.close()  # type: ignore[attr-defined]
