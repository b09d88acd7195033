"""The API's services, built once per process, and the per-request dependencies.

Everything a request needs (one Redis pool, one Celery app, the registry with
the object store of its records, the token store, admission, the turn runner)
is built once in ``Services.build`` and
hung on ``app.state``: no per-request construction on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import redis as redis_lib
from fastapi import Body, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from sandgrid.models import EmptyBody
from sandgrid.wire import catalog, redis_connect
from sandgrid.wire.catalog import CatalogView
from sandgrid.wire.objects import ObjectStore, open_objects
from sandgrid.wire.settings import Settings
from sandgrid.wire.type_store import TypeStore
from scheduler.audit.export import AuditExporter
from scheduler.audit.log import AuditLog
from scheduler.batch.capacity import (
    BatchSlots,
    CapacitySource,
    CeleryCapacity,
    InteractiveActivity,
    StaticCapacity,
)
from scheduler.batch.manager import BatchManager
from scheduler.batch.store import BatchStore
from scheduler.registry.records import SessionRecords
from scheduler.registry.sessions import SessionRegistry
from scheduler.registry.types import TypeCatalog
from scheduler.tenants import Tenant, TenantStore
from scheduler.turns.admission import Admission
from scheduler.turns.cancel import TurnCancels, celery_sender
from scheduler.turns.dispatch import CeleryDispatcher, Dispatcher
from scheduler.turns.idempotency import IdempotencyStore
from scheduler.turns.recovery import TurnRecovery
from scheduler.turns.runner import TurnRunner

__all__ = [
    "BATCH_DRAIN_INTERVAL_S",
    "NO_BODY",
    "CurrentTenant",
    "Services",
    "Svc",
    "current_tenant",
    "get_services",
    "no_body",
]

#: Batch runner threads drain Celery results every 20 ms, not every 1 ms.
BATCH_DRAIN_INTERVAL_S = 0.02


@dataclass
class Services:
    """The process-wide objects of the API."""

    settings: Settings
    redis: redis_lib.Redis[str]
    registry: SessionRegistry
    tenants: TenantStore
    admission: Admission
    runner: TurnRunner
    batches: BatchManager | None = None
    audit: AuditLog | None = None
    audit_exporter: AuditExporter | None = None
    types: TypeCatalog | None = None  # 25.1: the catalog of sandbox types

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        dispatcher: Dispatcher | None = None,
        client: redis_lib.Redis[str] | None = None,
        capacity: CapacitySource | None = None,
        objects: ObjectStore | None = None,
    ) -> Services:
        """Wire the services; ``dispatcher``, ``client``, ``capacity`` (the workers'
        batch limits) and ``objects`` (the store of session records, by default the
        snapshot store the settings name) are injectable for tests."""
        client = client or redis_connect.connect(
            settings.redis_url, decode_responses=True, max_connections=settings.api_threads + 16
        )
        registry = SessionRegistry(
            client,
            lease_ttl_s=settings.lease_ttl_s,
            closed_ttl_s=settings.closed_ttl_s,
            records=SessionRecords(objects := objects or open_objects(settings)),
        )
        admission = Admission(client, registry, queue_depth_limit=settings.queue_depth_limit)
        if dispatcher is None:
            from sandgrid.wire.celery_app import app as default_app
            from sandgrid.wire.celery_app import make_celery

            same = redis_connect.celery_broker(settings.redis_url)[0] == default_app.conf.broker_url
            dispatcher = CeleryDispatcher(default_app if same else make_celery(settings))
        audit = AuditLog(client, objects, settings.audit.command_chars)
        activity = InteractiveActivity()
        runner = _runner(
            settings, registry, admission, dispatcher, audit, on_interactive=activity.mark
        )
        tenants = TenantStore(
            client, tenants_file=settings.tenants_file, cache_s=settings.auth_cache_s
        )
        batches = _batch_manager(settings, client, runner, capacity, activity)
        exporter = AuditExporter(
            client,
            objects,
            interval_s=settings.audit.export_interval_s,
            keep_s=settings.audit.stream_keep_s,
        )
        types = _type_catalog(settings, client, objects)
        return cls(
            settings, client, registry, tenants, admission, runner, batches, audit, exporter, types
        )


def _type_catalog(
    settings: Settings, client: redis_lib.Redis[str], objects: ObjectStore
) -> TypeCatalog:
    """The registry's catalog, made this process's view of the types (25.1)."""
    store = TypeStore(client, objects)
    view = CatalogView(store, cache_s=settings.types_poll_s)
    catalog.install(view)
    return TypeCatalog(store, view)


def _runner(
    settings: Settings,
    registry: SessionRegistry,
    admission: Admission,
    dispatcher: Dispatcher,
    audit: AuditLog | None,
    *,
    on_interactive: Callable[[], None] | None = None,
) -> TurnRunner:
    """A turn runner with every part it uses, and the settings' timings."""
    return TurnRunner(
        registry,
        admission,
        dispatcher,
        recovery=TurnRecovery(registry),
        idempotency=IdempotencyStore(registry.redis),
        cancels=TurnCancels(registry, celery_sender(getattr(dispatcher, "app", None))),
        audit=audit,
        on_interactive=on_interactive,
        turn_margin_s=settings.turn_margin_s,
        lost_check_s=settings.lost_check_s,
        restart_grace_s=3 * settings.heartbeat_s,
        slot_wait_s=settings.slot_wait_s,
    )


def _batch_manager(
    settings: Settings,
    client: redis_lib.Redis[str],
    runner: TurnRunner,
    capacity: CapacitySource | None,
    activity: InteractiveActivity,
) -> BatchManager:
    """Batches run their turns through a runner of their own: same flow, but a
    dispatcher that waits with a coarser drain interval (less CPU beside
    interactive turns); ``activity`` is what the interactive runner marks."""
    turns, registry, admission = runner, runner.registry, runner.admission
    celery = getattr(runner.dispatcher, "app", None)
    if isinstance(runner.dispatcher, CeleryDispatcher):
        drain = CeleryDispatcher(runner.dispatcher.app, drain_interval_s=BATCH_DRAIN_INTERVAL_S)
        turns = _runner(settings, registry, admission, drain, runner.audit)
    if capacity is None:
        capacity = CeleryCapacity(celery, registry) if celery else StaticCapacity({"any": 4})
    store = BatchStore(client, ttl_s=settings.batch_ttl_s)
    return BatchManager(
        store, registry, turns, admission, BatchSlots(client), capacity, activity=activity
    )


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


_bearer = HTTPBearer(auto_error=False, description="a tenant's token (sandgrid tenants add)")


async def current_tenant(
    request: Request,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Tenant:
    """The caller's tenant; a cached token costs no round trip and no thread hop.

    Raises:
        AuthError: missing or unknown token (401).
    """
    store: TenantStore = request.app.state.services.tenants
    token = creds.credentials if creds else None
    cached = store.from_cache(token)
    if cached is not None:
        return cached
    return await run_in_threadpool(store.authenticate, token)


Svc = Annotated[Services, Depends(get_services)]
CurrentTenant = Annotated[Tenant, Depends(current_tenant)]


def no_body(
    body: Annotated[EmptyBody | None, Body(description="none, or {}")] = None,
) -> None:
    """The body of an operation that takes none: absent or ``{}``, else 422 naming the field.

    Without it FastAPI reads no body at all, and ``{"memory": true}`` would be
    silently ignored. Put ``dependencies=[NO_BODY]`` on every POST without a body.
    """


NO_BODY = Depends(no_body)
"""The dependency of ``no_body``, for a route decorator's ``dependencies=``."""
