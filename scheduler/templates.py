"""The API's side of templates: check, record, send the build; answer its state (25.2).

Everything a template's body can break is refused here with 422 naming the
field, before any node does work: a name that is taken (a type of the
catalog, or another template, any tenant's: a type's name is the grid's
queue), a base the tenant cannot use, build quotas above the tenant's limits,
an image ceiling above the tenant's ``max_image_mb``, a network policy when
the tenant has no network or beyond its ``network_ceiling``. What only the
build can know (a step's exit code, the image's real size, a base without
python3) ends the build ``failed``, with the reason in the record.

The build goes to the direct queue of one live node that runs gVisor (it
serves a runsc type). The record is written before the job is sent, and its
deadline (the build's time quota plus a margin) lets a build whose node died
be answered ``failed`` rather than ``building`` forever.

``DELETE /v1/templates/{name}`` removes a template: its type (409 with the
count while sessions of it are open, as ``DELETE /v1/types``), its manifest in
the grid's registry (the blobs go at the next ``make registry-gc``; nodes drop
their copies in their image collection) and its record. An operator's
``publish`` makes a ready template's type every tenant's.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from sandgrid.errors import (
    CapacityError,
    Conflict,
    ErrorCode,
    InvalidInput,
    NotFound,
)
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.templates import TemplateInfo, TemplateSpec
from sandgrid.wire import names
from sandgrid.wire.builds import BuildJob, TemplateStore
from scheduler.network import check_policy
from scheduler.registry.nodes import NodeDirectory
from scheduler.registry.types import TypeCatalog
from scheduler.template_images import drop_manifest, image_base, is_image_reference
from scheduler.tenants import Tenant

__all__ = [
    "LOST_MARGIN_S",
    "BuildSender",
    "ManifestDropper",
    "TemplateService",
    "celery_sender",
]

log = logging.getLogger(__name__)

#: A build still ``building`` this long after its time quota ran out lost its node.
LOST_MARGIN_S = 120.0

BuildSender = Callable[[BuildJob, str], None]
"""Sends a build to a queue (``celery_sender``; the tests' fake worker has its own)."""


def celery_sender(app: Any) -> BuildSender:
    """Send builds with ``app`` (``names.TASK_BUILD``, the JSON of the job, ``from`` by alias)."""

    def send(job: BuildJob, queue: str) -> None:
        body = job.model_dump(mode="json", by_alias=True)
        app.send_task(names.TASK_BUILD, args=[body], queue=queue)

    return send


ManifestDropper = Callable[[str, str], None]
"""Deletes an image's manifest (``image``, ``digest``) from its registry (``drop_manifest``)."""


def _invalid(field: str, rule: str, message: str) -> InvalidInput:
    return InvalidInput(
        f"{field}: {message}", operation="templates.build", context={"field": field, "rule": rule}
    )


class TemplateService:
    """Templates as the API serves them.

    Args:
        store: the templates' records.
        types: the catalog (names taken, the base, the built type).
        nodes: the live nodes (where a build can run).
        send: sends the build job to a node's queue (``celery_sender``).
        registry: the grid's image registry (``host:port``), where a ``from`` image must be.
    """

    def __init__(
        self,
        store: TemplateStore,
        types: TypeCatalog,
        nodes: NodeDirectory,
        send: BuildSender,
        registry: str = "",
    ) -> None:
        self.store = store
        self.types = types
        self.nodes = nodes
        self.send = send
        self.registry = registry

    def build(self, tenant: Tenant, spec: TemplateSpec) -> TemplateInfo:
        """Check ``spec``, record it ``building`` and send its build.

        Raises:
            InvalidInput: the field and rule broken (422).
            CapacityError: no live node runs gVisor (503).
        """
        base = self._base(tenant, spec)
        spec = _within_image_ceiling(tenant, spec)
        _check_quotas(tenant, spec)
        if spec.network is not None:
            if not tenant.limits.allow_network:
                raise _invalid(
                    "network", "network not allowed for tenant", "the tenant may have no network"
                )
            check_policy(tenant, spec.network)
        self._check_name(tenant, spec.name)
        node = self._node()
        now = time.time()
        info = TemplateInfo(
            name=spec.name,
            tenant=tenant.name,
            base=spec.from_,
            build_id=secrets.token_hex(8),
            state="building",
            created=now,
            deadline=now + spec.quotas.timeout_s,
        )
        if not self.store.create(info):
            raise _invalid("name", "a new template name", f"template {spec.name!r} exists")
        job = BuildJob(build_id=info.build_id, tenant=tenant.name, spec=spec, base=base)
        self.send(job, names.node_queue(node))
        log.info(
            "template %s of %s: build %s sent to %s", spec.name, tenant.name, info.build_id, node
        )
        return info

    def get(self, tenant: str | None, name: str) -> TemplateInfo:
        """The template as ``tenant`` sees it (another tenant's is 404, as an unknown one).

        Raises:
            NotFound: no such template of the tenant.
        """
        info = self.store.get(tenant, name)
        if info is None:
            raise NotFound(
                f"no template {name!r}", operation="templates.get", context={"template": name}
            )
        if info.state == "building" and time.time() > info.deadline + LOST_MARGIN_S:
            lost = info.model_copy(
                update={
                    "state": "failed",
                    "error": "the build's node was lost",
                    "finished": time.time(),
                }
            )
            self.store.put(lost)
            return lost
        return info

    def _base(self, tenant: Tenant, spec: TemplateSpec) -> SandboxTypeSpec:
        """The base: a type the tenant may use, or an image already in the grid's registry."""
        if is_image_reference(spec.from_):
            return image_base(spec.from_, self.registry, spec.name)
        base = self.types.current().get(spec.from_)
        if base is None or not base.visible_to(tenant.name):
            raise _invalid("from", "a sandbox type you may use", f"no sandbox type {spec.from_!r}")
        if tenant.limits.types is not None and base.name not in tenant.limits.types:
            raise _invalid(
                "from", "a type the tenant may use", f"type {base.name!r} is not allowed"
            )
        return base

    def remove(
        self, caller: str | None, name: str, drop: ManifestDropper = drop_manifest
    ) -> TemplateInfo:
        """Remove the template ``name``: its type, its registry manifest, its record.

        Raises:
            NotFound: no such template of the caller's.
            Conflict: it is still building, or sessions of its type are open (the count).
        """
        info = self.get(caller, name)
        if info.state == "building":
            raise Conflict(
                f"template {name!r} is still building; wait for its end",
                code=ErrorCode.TYPE_IN_USE,
                operation="templates.remove",
                context={"template": name, "state": info.state},
            )
        if name in self.types.view.refresh():
            self.types.remove(name)  # 409 with the count while sessions of it are open
        if info.image and info.digest:
            drop(info.image, info.digest)
        self.store.delete(name)
        log.info("template %s of %s removed", name, info.tenant)
        return info

    def publish(self, name: str) -> SandboxTypeSpec:
        """Make the ready template ``name``'s type usable by every tenant (the operator).

        Raises:
            NotFound: no such template, or its type is gone.
            Conflict: it is not ready.
        """
        info = self.get(None, name)
        if info.state != "ready":
            raise Conflict(
                f"template {name!r} is {info.state}, not ready: nothing to publish",
                code=ErrorCode.TYPE_IN_USE,
                operation="templates.publish",
                context={"template": name, "state": info.state},
            )
        kind = self.types.get(name, None)
        public = kind.model_copy(update={"tenant": None})
        self.types.store.put(public)
        self.types.view.refresh()
        log.info("template %s of %s published to every tenant", name, info.tenant)
        return public

    def _check_name(self, tenant: Tenant, name: str) -> None:
        if name in self.types.view.refresh():
            raise _invalid("name", "a new type name", f"sandbox type {name!r} exists")
        old = self.store.get(None, name)
        if old is None:
            return
        if old.tenant == tenant.name and old.state == "failed":
            self.store.delete(name)  # a failed build's name may be built again
            return
        raise _invalid("name", "a new template name", f"template {name!r} exists")

    def _node(self) -> str:
        """A live node that runs gVisor: it serves a runsc type."""
        runsc = [t.name for t in self.types.current().visible(None) if t.runtime == "runsc"]
        for kind in runsc:
            found = self.nodes.serving(kind)
            if found:
                return found[secrets.randbelow(len(found))]
        raise CapacityError(
            "no live worker runs gVisor (serves a runsc type): templates are built there",
            operation="templates.build",
            context={"retry_after": 5.0},
        )


def _within_image_ceiling(tenant: Tenant, spec: TemplateSpec) -> TemplateSpec:
    """A template that names no ``image_mb`` gets the default, or the tenant's ceiling if lower."""
    if "image_mb" in spec.quotas.model_fields_set:
        return spec
    image_mb = min(spec.quotas.image_mb, tenant.limits.max_image_mb)
    return spec.model_copy(update={"quotas": spec.quotas.model_copy(update={"image_mb": image_mb})})


def _check_quotas(tenant: Tenant, spec: TemplateSpec) -> None:
    lim, q = tenant.limits, spec.quotas
    pairs = [
        ("cpus", q.cpus, lim.max_cpus),
        ("memory_mb", q.memory_mb, lim.max_memory_mb),
        ("timeout_s", q.timeout_s, lim.max_timeout_s),
        ("image_mb", q.image_mb, lim.max_image_mb),
    ]
    for name, value, ceiling in pairs:
        if value > ceiling:
            raise _invalid(
                f"quotas.{name}",
                "within the tenant's limits",
                f"{value} is above tenant {tenant.name!r}'s limit {ceiling}",
            )
