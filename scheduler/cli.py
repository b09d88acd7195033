"""The control plane's commands, plugged into ``sandgrid`` (entry points ``sandgrid.commands``).

sandgrid serve                   # the HTTP API on 127.0.0.1:8700 (OpenAPI at /docs)
sandgrid tenants add acme        # prints a new token, once
sandgrid tenants ls
sandgrid admin rebuild           # re-learn every session recorded in the object store
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import err_console, readable_errors
from sandgrid.errors import SandgridError

__all__ = ["admin", "admin_rebuild", "serve", "tenants", "tenants_add", "tenants_ls"]


@click.command()
@click.option("--host", default=None, help="bind address [SANDGRID_API_HOST, 127.0.0.1]")
@click.option("--port", type=int, default=None, help="port [SANDGRID_API_PORT, 8700]")
@click.option("--access-log/--no-access-log", default=False, help="log every request")
@click.option("--log-level", default="info", show_default=True)
def serve(host: str | None, port: int | None, access_log: bool, log_level: str) -> None:
    """Serve the HTTP API (OpenAPI at /docs)."""
    import uvicorn

    from sandgrid.wire.credentials import refusal
    from sandgrid.wire.settings import get_settings

    settings = get_settings()
    if (refused := refusal(settings, "the API")) is not None:
        raise click.ClickException(refused)
    uvicorn.run(
        "scheduler.api:create_app",
        factory=True,
        host=host or settings.api_host,
        port=port or settings.api_port,
        access_log=access_log,
        log_level=log_level,
    )


@click.group()
def tenants() -> None:
    """Manage tenants and their tokens (in Redis)."""


@tenants.command(name="add")
@click.argument("name")
@click.option("--max-sessions", type=int, default=None, help="live sessions ceiling")
@click.option("--max-turns", type=int, default=None, help="concurrent turns ceiling")
@readable_errors
def tenants_add(name: str, max_sessions: int | None, max_turns: int | None) -> None:
    """Add a token for tenant NAME and print it (shown only this once)."""
    import redis
    from pydantic import ValidationError

    from sandgrid.errors import InvalidInput
    from sandgrid.wire.settings import get_settings
    from scheduler.tenants import TenantLimits, TenantStore

    settings = get_settings()
    given: dict[str, int] = {}
    if max_sessions is not None:
        given["max_sessions"] = max_sessions
    if max_turns is not None:
        given["max_concurrent_turns"] = max_turns
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        token = TenantStore(client).add(name, TenantLimits.model_validate(given))
    except ValidationError as exc:
        raise InvalidInput(f"tenant {name!r}: {exc.errors()[0]['msg']}") from exc
    except redis.RedisError as exc:
        raise SandgridError(f"Redis at {settings.redis_url} unreachable: {exc}") from exc
    click.echo(token)
    err_console.print(f"tenant {name!r}: token above; export SANDGRID_TOKEN=<token>. Keep it.")


@tenants.command(name="ls")
@readable_errors
def tenants_ls() -> None:
    """List tenants (never tokens)."""
    import redis

    from sandgrid.wire.settings import get_settings
    from scheduler.tenants import TenantStore

    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    store = TenantStore(client, tenants_file=settings.tenants_file)
    table = Table("tenant", "max sessions", "max turns")
    for t in store.tenants():
        table.add_row(t.name, str(t.limits.max_sessions), str(t.limits.max_concurrent_turns))
    Console().print(table)


@click.group()
def admin() -> None:
    """Operate the grid's registry (Redis) and its records (the object store)."""


@admin.command(name="rebuild")
@readable_errors
def admin_rebuild() -> None:
    """Re-learn every session recorded in the object store (all tenants).

    For a Redis that lost its data: each session whose record is in the store,
    not closed, and unknown to Redis is put back with its latest snapshot.
    Idempotent: sessions Redis knows are left as they are.
    """
    import redis

    from sandgrid.wire.objects import open_objects
    from sandgrid.wire.settings import get_settings
    from scheduler.registry.records import SessionRecords
    from scheduler.registry.sessions import SessionRegistry

    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    registry = SessionRegistry(
        client,
        lease_ttl_s=settings.lease_ttl_s,
        closed_ttl_s=settings.closed_ttl_s,
        records=SessionRecords(open_objects(settings)),
    )
    try:
        report = registry.rebuild()
    except redis.RedisError as exc:
        raise SandgridError(f"Redis at {settings.redis_url} unreachable: {exc}") from exc
    click.echo(
        f"re-learned {report.relearned} sessions; skipped {report.known + report.closed} "
        f"({report.known} known to Redis, {report.closed} closed or unreadable)"
    )
