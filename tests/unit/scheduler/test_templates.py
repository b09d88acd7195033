"""The API's checks of a template (25.2, 25.5): every bad field is 422 naming it, before a node
does any work; a good one is recorded ``building`` and sent to a gVisor node's queue."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.errors import CapacityError, Conflict, InvalidInput, NotFound
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.templates import TemplateSpec
from sandgrid.wire import names
from sandgrid.wire.builds import BuildJob, TemplateStore
from sandgrid.wire.catalog import CatalogView
from sandgrid.wire.objects.local import LocalObjects
from sandgrid.wire.type_store import TypeStore
from scheduler.registry.types import TypeCatalog
from scheduler.templates import LOST_MARGIN_S, TemplateService, celery_sender
from scheduler.tenants import Tenant, TenantLimits


class _Nodes:
    def __init__(self, serving: dict[str, list[str]]) -> None:
        self.by_type = serving

    def serving(self, kind: str) -> list[str]:
        return self.by_type.get(kind, [])


class _App:
    """A Celery app that keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str]] = []

    def send_task(self, name: str, *, args: list[Any], queue: str) -> None:
        self.sent.append((name, args, queue))


def _type(name: str, runtime: str = "runc", **kw: Any) -> SandboxTypeSpec:
    return SandboxTypeSpec.model_validate(
        {
            "name": name,
            "image": f"sandgrid/{name}:1",
            "digest": "sha256:" + "a" * 64,
            "runtime": runtime,
            **kw,
        }
    )


@pytest.fixture
def service(redis_client: redis.Redis[str], tmp_path: Path) -> TemplateService:
    store = TypeStore(redis_client, LocalObjects(tmp_path))
    store.seed([_type("python"), _type("python-gvisor", "runsc"), _type("secret", tenant="globex")])
    catalog = TypeCatalog(store, CatalogView(store, cache_s=0))
    nodes = _Nodes({"python-gvisor": ["w1"]})
    app = _App()
    service = TemplateService(TemplateStore(redis_client), catalog, nodes, celery_sender(app))  # type: ignore[arg-type]
    service.app = app  # type: ignore[attr-defined]
    return service


ACME = Tenant(
    name="acme",
    limits=TenantLimits(allow_network=True, network_ceiling=["*.example.org"], max_image_mb=1000),
)
PLAIN = Tenant(name="plain")


def _spec(**kw: Any) -> TemplateSpec:
    return TemplateSpec.model_validate(
        {"name": "tpl", "from": "python", "steps": [{"run": "true"}], **kw}
    )


def test_a_good_template_is_recorded_building_and_sent_to_a_gvisor_node(
    service: TemplateService,
) -> None:
    info = service.build(ACME, _spec(network={"allow": ["pypi.example.org"]}))
    assert info.state == "building" and info.tenant == "acme" and info.base == "python"
    [(task, [body], queue)] = service.app.sent
    assert task == names.TASK_BUILD and queue == names.node_queue("w1")
    job = BuildJob.model_validate(body)
    assert job.build_id == info.build_id and job.base.name == "python" and job.spec.name == "tpl"
    assert service.get("acme", "tpl").state == "building"


@pytest.mark.parametrize(
    ("tenant", "spec", "field"),
    [
        (ACME, _spec(name="python"), "name"),
        (ACME, _spec(name="secret"), "name"),
        (ACME, _spec(**{"from": "nope"}), "from"),
        (ACME, _spec(**{"from": "secret"}), "from"),
        (ACME, _spec(quotas={"cpus": 64}), "quotas.cpus"),
        (ACME, _spec(quotas={"memory_mb": 100000}), "quotas.memory_mb"),
        (ACME, _spec(quotas={"timeout_s": 7200}), "quotas.timeout_s"),
        (ACME, _spec(quotas={"image_mb": 1001}), "quotas.image_mb"),
        (ACME, _spec(network={"allow": ["pypi.org"]}), "network.allow[0]"),
        (PLAIN, _spec(network={"allow": ["pypi.org"]}), "network"),
    ],
)
def test_bad_input_is_422_naming_the_field(
    service: TemplateService, tenant: Tenant, spec: TemplateSpec, field: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        service.build(tenant, spec)
    assert err.value.http_status == 422
    assert err.value.context["field"] == field, err.value
    assert service.app.sent == []


def test_a_name_another_tenant_is_building_is_taken_and_its_template_invisible(
    service: TemplateService,
) -> None:
    service.build(ACME, _spec())
    with pytest.raises(InvalidInput) as err:
        service.build(Tenant(name="globex"), _spec())
    assert err.value.context["field"] == "name"
    with pytest.raises(NotFound):
        service.get("globex", "tpl")
    assert service.get(None, "tpl").tenant == "acme"  # the operator sees it


def test_a_failed_template_may_be_built_again_and_a_lost_build_is_answered_failed(
    service: TemplateService,
) -> None:
    first = service.build(ACME, _spec())
    service.store.put(first.model_copy(update={"state": "failed"}))
    second = service.build(ACME, _spec())
    assert second.build_id != first.build_id
    service.store.put(second.model_copy(update={"deadline": time.time() - LOST_MARGIN_S - 1}))
    lost = service.get("acme", "tpl")
    assert lost.state == "failed" and lost.error is not None and "lost" in lost.error


def test_no_gvisor_node_is_503(service: TemplateService) -> None:
    service.nodes = _Nodes({"python": ["w1"]})  # type: ignore[assignment]
    with pytest.raises(CapacityError):
        service.build(ACME, _spec())
    assert service.store.get(None, "tpl") is None


def _ready(service: TemplateService) -> None:
    """Make ``tpl`` a ready template of acme with its private type, as a node would."""
    info = service.build(ACME, _spec())
    image = "127.0.0.1:5000/sandgrid/tpl-acme-tpl:" + info.build_id
    digest = "sha256:" + "b" * 64
    service.store.put(info.model_copy(update={"state": "ready", "image": image, "digest": digest}))
    kind = _type("tpl", "runsc", tenant="acme").model_copy(update={"image": image})
    service.types.store.put(kind)
    service.types.view.refresh()


def test_removing_a_template_drops_its_type_its_manifest_and_its_record(
    service: TemplateService,
) -> None:
    _ready(service)
    dropped: list[tuple[str, str]] = []
    with pytest.raises(NotFound):  # another tenant's is as unknown
        service.remove("globex", "tpl", lambda i, d: dropped.append((i, d)))
    gone = service.remove("acme", "tpl", lambda i, d: dropped.append((i, d)))
    assert dropped == [(gone.image, gone.digest)]
    assert "tpl" not in service.types.view.refresh()
    assert service.store.get(None, "tpl") is None


def test_a_template_in_use_or_building_is_409_and_stays(
    service: TemplateService, redis_client: redis.Redis[str]
) -> None:
    service.build(ACME, _spec())
    with pytest.raises(Conflict, match="still building"):
        service.remove("acme", "tpl", lambda i, d: None)
    service.store.delete("tpl")
    _ready(service)
    redis_client.sadd(names.tenant_sessions_key("acme"), "s1")
    redis_client.hset(names.session_key("s1"), "type", '"tpl"')
    with pytest.raises(Conflict) as err:
        service.remove("acme", "tpl", lambda i, d: None)
    assert err.value.http_status == 409 and err.value.context["sessions"] == 1
    assert service.store.get(None, "tpl") is not None and "tpl" in service.types.view.refresh()


def test_publishing_makes_a_ready_templates_type_every_tenants(service: TemplateService) -> None:
    service.build(ACME, _spec())
    with pytest.raises(Conflict, match="not ready"):
        service.publish("tpl")
    service.store.delete("tpl")
    _ready(service)
    assert service.types.get("tpl", "acme").tenant == "acme"
    with pytest.raises(NotFound):
        service.types.get("tpl", "globex")
    assert service.publish("tpl").tenant is None
    assert service.types.get("tpl", "globex").name == "tpl"
