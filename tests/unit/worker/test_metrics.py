"""The node's metrics: its server, the pool's gauges, a turn's counters."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sandgrid.models import SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire import catalog
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.settings import Settings
from tests.support.listeners import listen_addresses
from worker import metrics


@pytest.fixture
def private_type() -> Iterator[None]:
    """A catalog with an operator's ``python`` and tenant t1's template ``tpl-secret``."""
    types = [
        SandboxTypeSpec.model_validate(
            {"name": "python", "image": "sandgrid/sandbox-python:1", "runtime": "runc"}
        ),
        SandboxTypeSpec.model_validate(
            {
                "name": "tpl-secret",
                "image": "sandgrid/tpl-t1-tpl-secret:1",
                "runtime": "runsc",
                "tenant": "t1",
            }
        ),
    ]
    before = catalog.view()
    catalog.install(catalog.CatalogView(fallback=lambda: catalog.Catalog(types)))
    try:
        yield
    finally:
        catalog.install(before)


def _session(sandbox_type: str) -> SessionInfo:
    return SessionInfo.model_validate(
        {
            "id": "s-1",
            "tenant": "t1",
            "type": sandbox_type,
            "state": "live",
            "quotas": {},
            "created_at": "2026-01-01T00:00:00Z",
            "last_used": "2026-01-01T00:00:00Z",
        }
    )


def test_pool_gauges_are_read_at_scrape_time() -> None:
    stats = {"python": {"warm": 2, "leased": 1, "creating": 0, "target": 1}}
    registry = CollectorRegistry()
    registry.register(metrics.PoolCollector("n1", lambda: stats, lambda: 3))
    stats["python"]["warm"], stats["python"]["target"] = 1, 4
    text = generate_latest(registry).decode()
    assert 'sandgrid_pool_sandboxes{node="n1",state="warm",type="python"} 1.0' in text
    assert 'sandgrid_pool_target{node="n1",type="python"} 4.0' in text
    assert 'sandgrid_node_containers{node="n1"} 3.0' in text


def test_a_turn_is_counted_with_its_stages() -> None:
    info = SessionInfo.model_validate(
        {
            "id": "s-1",
            "tenant": "t",
            "type": "python",
            "state": "live",
            "quotas": {},
            "created_at": "2026-01-01T00:00:00Z",
            "last_used": "2026-01-01T00:00:00Z",
        }
    )
    job = TurnJob(turn_id="t-1", session=info, op=ExecOp(request={"shell": "true"}))
    before = metrics.TURNS.labels(
        type="python", op="exec", outcome="store_unavailable"
    )._value.get()
    out = TurnOutcome(
        turn_id="t-1",
        node="n1",
        ok=False,
        error={"code": "store_unavailable"},
        timings={"worker_ms": 5.0},
    )
    metrics.observe_outcome(job, out)
    after = metrics.TURNS.labels(type="python", op="exec", outcome="store_unavailable")._value.get()
    assert after == before + 1
    assert metrics.STORE_ERRORS.labels(store="objects", operation="exec")._value.get() >= 1


def test_serve_falls_back_to_a_free_port_when_taken() -> None:
    port = metrics.serve(0, "127.0.0.1")
    again = metrics.serve(port, "127.0.0.1")  # taken: another free port, not a crash
    assert again != port
    assert httpx.get(f"http://127.0.0.1:{again}/metrics", timeout=5).status_code == 200


def test_metrics_listen_on_loopback_by_default() -> None:
    """23.3: a node's /metrics socket is bound to 127.0.0.1 unless an address is named."""
    assert Settings().worker.metrics_addr == "127.0.0.1"
    port = metrics.serve(0)
    assert listen_addresses(port) == {"127.0.0.1"}
    assert metrics.advertised_host(Settings().worker.metrics_addr) == "127.0.0.1"


def test_metrics_address_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDGRID_WORKER__METRICS_ADDR", "127.0.0.3")
    addr = Settings().worker.metrics_addr
    port = metrics.serve(0, addr)
    assert listen_addresses(port) == {"127.0.0.3"}
    assert metrics.advertised_host(addr) == "127.0.0.3"


@pytest.mark.usefixtures("private_type")
def test_a_tenants_type_is_counted_as_private_never_by_its_name() -> None:
    before = metrics.TURNS.labels(type="private", op="exec", outcome="ok")._value.get()
    for name in ("tpl-secret", "gone-since"):  # a template; a type the catalog no longer has
        job = TurnJob(turn_id="t-1", session=_session(name), op=ExecOp(request={"shell": "true"}))
        metrics.observe_outcome(job, TurnOutcome(turn_id="t-1", node="n1", ok=True))
    after = metrics.TURNS.labels(type="private", op="exec", outcome="ok")._value.get()
    assert after == before + 2
    assert "tpl-secret" not in generate_latest().decode()


@pytest.mark.usefixtures("private_type")
def test_pool_gauges_sum_private_types_under_one_label() -> None:
    stats = {
        "python": {"warm": 1, "leased": 0, "creating": 0, "target": 1},
        "tpl-secret": {"warm": 0, "leased": 2, "creating": 0, "target": 0},
        "tpl-other": {"warm": 0, "leased": 1, "creating": 1, "target": 0},
    }
    registry = CollectorRegistry()
    registry.register(metrics.PoolCollector("n1", lambda: stats, lambda: 5))
    text = generate_latest(registry).decode()
    assert 'sandgrid_pool_sandboxes{node="n1",state="leased",type="private"} 3.0' in text
    assert 'sandgrid_pool_sandboxes{node="n1",state="creating",type="private"} 1.0' in text
    assert 'sandgrid_pool_sandboxes{node="n1",state="warm",type="python"} 1.0' in text
    assert "tpl-" not in text


@pytest.mark.usefixtures("private_type")
def test_an_image_pull_names_only_an_operators_repository() -> None:
    assert catalog.metric_image("sandgrid/sandbox-python:1", "sandgrid/sandbox-python") == (
        "sandgrid/sandbox-python"
    )
    assert catalog.metric_image("sandgrid/tpl-t1-tpl-secret:1", "sandgrid/tpl-t1-tpl-secret") == (
        "private"
    )
    assert catalog.metric_image("sandgrid/named-by-none:1", "sandgrid/named-by-none") == (
        "sandgrid/named-by-none"  # an operator's image before its type is added
    )
