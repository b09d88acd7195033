"""The control plane's commands, plugged into ``sandgrid`` (entry points ``sandgrid.commands``).

sandgrid serve                   # the HTTP API on 127.0.0.1:8700 (OpenAPI at /docs)
sandgrid tenants add acme        # prints a new token, once
sandgrid tenants set acme --max-sessions 50 --network-ceiling pypi.org:443
sandgrid tenants rotate acme     # a new token, once; the old one refused at once
sandgrid tenants revoke acme     # every token of acme refused at once
sandgrid tenants ls | sandgrid tenants show acme   (scheduler.tenant_cli)
sandgrid admin rebuild           # re-learn every session recorded in the object store
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from sandgrid.cli.helpers import readable_errors
from sandgrid.errors import SandgridError

__all__ = ["admin", "admin_rebuild", "serve", "tenants"]


@click.command()
@click.option("--host", default=None, help="bind address [SANDGRID_API_HOST, 127.0.0.1]")
@click.option("--port", type=int, default=None, help="port [SANDGRID_API_PORT, 8700]")
@click.option(
    "--access-log/--no-access-log",
    default=False,
    help="log every request (method, path without its query string, status)",
)
@click.option("--log-level", default=None, help="[SANDGRID_LOG_LEVEL, info]")
def serve(host: str | None, port: int | None, access_log: bool, log_level: str | None) -> None:
    """Serve the HTTP API (OpenAPI at /docs).

    Logs are the grid's one-line records (``SANDGRID_LOG_FORMAT``, json or text;
    ``sandgrid.wire.logs``): uvicorn's own configuration is not used.
    """
    import uvicorn

    from sandgrid.wire.credentials import refusal
    from sandgrid.wire.logs import setup_logging
    from sandgrid.wire.settings import get_settings

    settings = get_settings()
    level = (log_level or settings.log_level).upper()
    setup_logging(settings.log_format, level)
    if (refused := refusal(settings, "the API")) is not None:
        raise click.ClickException(refused)
    uvicorn.run(
        "scheduler.api:create_app",
        factory=True,
        host=host or settings.api_host,
        port=port or settings.api_port,
        access_log=access_log,
        log_level=level.lower(),
        log_config=None,
    )


class _Lazy(click.Group):
    """A group whose commands are a module's ``COMMANDS``, imported only when the group
    itself is used: ``sandgrid --help`` imports nothing of them."""

    def __init__(self, *args: Any, module: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.module = module

    def _commands(self) -> dict[str, click.Command]:
        commands: dict[str, click.Command] = importlib.import_module(self.module).COMMANDS
        return commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._commands())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._commands().get(cmd_name)


@click.group(cls=_Lazy, module="scheduler.tenant_cli")
def tenants() -> None:
    """Manage tenants, their limits and their tokens (in Redis)."""


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

    from sandgrid.wire import redis_connect
    from sandgrid.wire.objects import open_objects
    from sandgrid.wire.settings import get_settings
    from scheduler.registry.records import SessionRecords
    from scheduler.registry.sessions import SessionRegistry

    settings = get_settings()
    client = redis_connect.connect(settings.redis_url, decode_responses=True)
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
