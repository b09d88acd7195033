"""A node follows the catalog (25.1): the watch, the consumer's queues, the pool's targets."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sandgrid.models import Quotas
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire.catalog import Catalog, CatalogView
from tests.unit.worker.sessions.test_pool_unit import FakeBackend
from worker.serving import QueueControl, TypeWatch, selected
from worker.sessions.pool import WarmPool


def _spec(name: str, **kw: Any) -> SandboxTypeSpec:
    return SandboxTypeSpec.model_validate({"name": name, "image": "a/b:1", "runtime": "runc", **kw})


class Source:
    """A registry whose catalog the test changes."""

    def __init__(self, *types: SandboxTypeSpec) -> None:
        self.catalog = Catalog(types, 1)

    def set(self, *types: SandboxTypeSpec) -> None:
        self.catalog = Catalog(types, self.catalog.version + 1)

    def version(self) -> int | None:
        return self.catalog.version

    def load(self) -> Catalog | None:
        return self.catalog


class Node:
    """What the watch drives: the served types, and what it was told."""

    def __init__(self, served: dict[str, SandboxTypeSpec]) -> None:
        self.served = dict(served)
        self.missing: set[str] = set()
        self.log: list[str] = []

    def start(self, spec: SandboxTypeSpec) -> None:
        self.served[spec.name] = spec
        self.log.append(f"+{spec.name}")

    def stop(self, name: str) -> None:
        self.served.pop(name)
        self.log.append(f"-{name}")

    def check(self, spec: SandboxTypeSpec) -> str | None:
        return "image missing" if spec.name in self.missing else None


def _watch(source: Source, node: Node, selector: list[str], recheck_s: float = 60) -> TypeWatch:
    return TypeWatch(
        selector,
        CatalogView(source, cache_s=0),
        serving=lambda: dict(node.served),
        check=node.check,
        start=node.start,
        stop=node.stop,
        interval_s=1,
        recheck_s=recheck_s,
    )


def test_a_selector_takes_names_and_patterns_in_order() -> None:
    cat = Catalog([_spec("python"), _spec("python-gvisor"), _spec("bfcl"), _spec("python-small")])
    assert selected(["python", "python-*"], cat) == ["python", "python-gvisor", "python-small"]
    assert selected(["*"], cat) == ["bfcl", "python", "python-gvisor", "python-small"]
    assert selected(["node", "bfcl"], cat) == ["bfcl"]  # a name gone from the catalog: none


def test_the_watch_starts_added_types_updates_changed_ones_and_stops_removed_ones() -> None:
    python = _spec("python")
    source, node = Source(python), Node({"python": python})
    watch = _watch(source, node, ["python", "python-*"])
    watch.sync()
    assert node.log == []  # nothing moved
    small = _spec("python-small", pool_size=1)
    source.set(python, small, _spec("bfcl"))
    watch.sync()
    assert node.log == ["+python-small"]  # bfcl is not selected
    bigger = _spec("python-small", pool_size=3)
    source.set(python, bigger)
    watch.sync()
    assert (
        node.log[1:] == ["+python-small"] and node.served["python-small"] == bigger  # in place
    )
    source.set(python)
    watch.sync()
    assert node.log[2:] == ["-python-small"] and set(node.served) == {"python"}


def test_a_named_type_not_in_the_catalog_yet_is_served_once_it_is() -> None:
    """A worker may start before the API seeds the types file: ``--types python,node``
    on a registry that knows only python serves python, then node when it appears."""
    python, node_type = _spec("python"), _spec("node")
    source, node = Source(python), Node({"python": python})
    watch = _watch(source, node, ["python", "node"])
    watch.sync()
    assert set(node.served) == {"python"}
    source.set(python, node_type)
    watch.sync()
    assert node.log == ["+node"] and set(node.served) == {"python", "node"}


def test_a_node_started_with_a_name_the_catalog_lacks_warns_and_keeps_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from worker.node import _selector

    with caplog.at_level("WARNING", logger="worker.node"):
        assert _selector("w9", ["python", "nodex-*", "nodex"]) == ["python", "nodex-*", "nodex"]
    assert "'nodex' is not in the catalog yet" in caplog.text and "nodex-*" not in caplog.text


def test_a_type_the_node_cannot_serve_is_left_out_until_it_can() -> None:
    python, small = _spec("python"), _spec("python-small")
    source, node = Source(python, small), Node({"python": python})
    node.missing = {"python", "python-small"}
    watch = _watch(source, node, ["python*"], recheck_s=0)
    watch.sync()  # the first look checks what the node started with too
    assert node.served == {} and node.log == ["-python"]
    node.missing = set()
    watch.sync()
    assert set(node.served) == {"python", "python-small"}


class Consumer:
    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def call_soon(self, fn: Any, queue: str) -> None:
        fn(queue)

    def add_task_queue(self, queue: str) -> None:
        self.ran.append(("add", queue))

    def cancel_task_queue(self, queue: str) -> None:
        self.ran.append(("cancel", queue))


def test_queue_changes_wait_for_the_consumer_then_run_on_it() -> None:
    control, consumer = QueueControl(), Consumer()
    control.consume(["sbx.a", "sbx.a.batch"])
    control.cancel(["sbx.b"])
    assert consumer.ran == []
    control.attach(consumer)
    assert consumer.ran == [("add", "sbx.a"), ("add", "sbx.a.batch"), ("cancel", "sbx.b")]
    control.cancel(["sbx.a"])
    assert consumer.ran[-1] == ("cancel", "sbx.a")


def test_a_pools_target_moves_at_runtime_and_a_late_creation_is_not_kept() -> None:
    fake = FakeBackend()
    pool = WarmPool(lambda _t: fake, {"python": 1})  # type: ignore[arg-type,return-value]
    pool.set_target("python-small", 2, Quotas.model_validate({"memory_mb": 256}))
    pool.fill()
    assert pool.warm_count("python-small") == 2
    assert pool.quotas_for("python-small").memory_mb == 256
    pool.set_target("python-small", 0)
    assert pool.warm_count("python-small") == 0 and len(fake.destroyed) == 2
    pool._creating["python-small"] += 1  # a creation reserved before the target fell
    assert pool._refill_one("python-small") and pool.warm_count("python-small") == 0
    assert len(fake.destroyed) == 3
    pool.close()


def test_a_node_serves_an_added_type_and_lets_a_removed_one_go(
    redis_client: Any, tmp_path: Any
) -> None:
    """The node's side: heartbeat types, warm pool, consumer queues follow the catalog."""
    from sandgrid.wire.objects.local import LocalObjects
    from sandgrid.wire.redis_ledger import RedisLedger
    from sandgrid.wire.settings import Settings, WorkerSettings
    from worker.node import Node
    from worker.snapshots import SnapshotStore

    fake = FakeBackend()
    fake.engine = SimpleNamespace(has_image=lambda image: True, available=lambda: True)  # type: ignore[attr-defined]
    fake.images = None  # type: ignore[attr-defined]  # no registry: the image is here by its tag
    python = _spec("python")
    source = Source(python)
    view = CatalogView(source, cache_s=0)
    from sandgrid.wire import catalog

    catalog.install(view)
    node = Node(
        "n1",
        ["python", "python-*"],
        Settings(worker=WorkerSettings(pool_size=0)),
        RedisLedger(redis_client),
        SnapshotStore(LocalObjects(tmp_path)),
        backends={"runc": fake},  # type: ignore[dict-item]
        pool=WarmPool(lambda _t: fake, {"python": 0}),  # type: ignore[arg-type,return-value]
    )
    consumer = Consumer()
    node.queues.attach(consumer)
    watch = node.watch_catalog(view)
    watch.sync()
    assert node.types == ["python"] and node.heartbeat.types == ("python",)
    source.set(python, _spec("python-small", pool_size=1, pool_max=2, quotas={"memory_mb": 256}))
    watch.sync()
    assert node.heartbeat.types == ("python", "python-small")
    assert ("add", "sbx.python-small") in consumer.ran
    assert ("add", "sbx.python-small.batch") in consumer.ran
    node.pool.fill()  # type: ignore[attr-defined]
    assert node.pool.warm_count("python-small") == 1  # type: ignore[attr-defined]
    assert fake.created[-1].quotas.memory_mb == 256  # the type's default quotas
    assert node.pool._ceilings["python-small"] == 2  # type: ignore[attr-defined]  # its pool_max
    source.set(python)
    watch.sync()
    assert node.heartbeat.types == ("python",) and ("cancel", "sbx.python-small") in consumer.ran
    assert node.pool.warm_count("python-small") == 0  # type: ignore[attr-defined]
    node.pool.close()


def test_a_node_with_the_grids_registry_pulls_a_missing_image_before_it_serves() -> None:
    """Issue 25.3 in 25.1's check: with the registry, ``image_ready`` is the pull
    (by tag, as sandboxes are created), and a pull that fails is not servable."""
    from sandgrid.errors import CapacityError
    from worker.serving.ability import can_serve, image_ready

    pulled: list[tuple[str, str | None]] = []

    def pull(image: str, digest: str | None) -> str:
        pulled.append((image, digest))
        return f"127.0.0.1:5000/{image}"

    def missing(image: str, digest: str | None) -> str:
        raise CapacityError(f"{image} is not in the registry")

    spec = _spec("python")
    manager = SimpleNamespace(
        images=pull, engine=SimpleNamespace(has_image=lambda image: False, available=lambda: True)
    )
    assert image_ready(manager, spec) is True  # type: ignore[arg-type]
    assert pulled == [(spec.image, None)]
    manager.images = missing
    assert "is not on this node" in str(can_serve(manager, spec))  # type: ignore[arg-type]
