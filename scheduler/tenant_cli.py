"""``sandgrid tenants``: tokens and limits of tenants, in Redis (``scheduler.tenants``).

sandgrid tenants add acme --max-sessions 50     # prints a new token, once
sandgrid tenants set acme --network-ceiling pypi.org:443 --allow-network true
sandgrid tenants set acme --clear types         # back to the default (every type)
sandgrid tenants rotate acme                    # a new token, once; the old refused at once
sandgrid tenants revoke acme                    # every token of acme refused at once
sandgrid tenants show acme | sandgrid tenants ls

Loaded only when ``sandgrid tenants`` is used (``scheduler.cli``), and imports
redis only when a command runs: ``sandgrid tenants --help`` works without the
server extra, and a command run without it says which extra to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import err_console, readable_errors
from sandgrid.errors import InvalidInput, SandgridError
from scheduler.tenant_flags import limit_changes, limit_options

if TYPE_CHECKING:
    from scheduler.tenants import TenantChange, TenantStore

__all__ = [
    "COMMANDS",
    "tenants_add",
    "tenants_ls",
    "tenants_revoke",
    "tenants_rotate",
    "tenants_set",
    "tenants_show",
]


def _store(*, with_file: bool = True) -> TenantStore:
    """The token store of the settings' Redis (and tenants file)."""
    from sandgrid.wire import catalog, redis_connect
    from sandgrid.wire.settings import get_settings
    from sandgrid.wire.type_store import TypeStore
    from scheduler.tenants import TenantStore

    settings = get_settings()
    client = redis_connect.connect(settings.redis_url, decode_responses=True)
    catalog.install(catalog.CatalogView(TypeStore(client), cache_s=0))  # --types: the registry's
    return TenantStore(client, tenants_file=settings.tenants_file if with_file else None)


@contextmanager
def _redis_errors() -> Iterator[None]:
    """A Redis failure as a readable error naming the Redis."""
    import redis

    try:
        yield
    except redis.RedisError as exc:
        from sandgrid.wire.settings import get_settings

        url = get_settings().redis_url
        raise SandgridError(f"Redis at {url} unreachable: {exc}") from exc


@click.command(name="add")
@click.argument("name")
@limit_options(clear=False)
@readable_errors
def tenants_add(name: str, **flags: Any) -> None:
    """Add a token for tenant NAME and print it (shown only this once).

    Its limits are the flags given, the defaults for the rest.
    """
    from scheduler.tenants import check_limits

    changes, _ = limit_changes(flags)
    limits = check_limits(name, changes)  # the name too
    with _redis_errors():
        token = _store(with_file=False).add(name, limits)
    click.echo(token)
    err_console.print(f"tenant {name!r}: token above; export SANDGRID_TOKEN=<token>. Keep it.")


@click.command(name="set")
@click.argument("name")
@limit_options(clear=True)
@readable_errors
def tenants_set(name: str, **flags: Any) -> None:
    """Change limits of tenant NAME (every token of it); print its limits as JSON.

    Validated as the API validates: a bad value changes nothing and exits 1 with
    the field and the rule. The API's next request uses the new limits.
    """
    changes, cleared = limit_changes(flags)
    if not changes and not cleared:
        raise InvalidInput("give a limit to set (see --help) or --clear FIELD")
    with _redis_errors():
        change = _store().update(name, changes, cleared)
    click.echo(change.tenant.limits.model_dump_json(indent=2, exclude={"v"}))
    _report(change, f"tenant {name!r}: limits of {change.tokens} token(s) set")


@click.command(name="rotate")
@click.argument("name")
@readable_errors
def tenants_rotate(name: str) -> None:
    """Give tenant NAME one new token (printed once); its old tokens are refused at once."""
    with _redis_errors():
        change = _store().rotate(name)
    click.echo(change.token)
    _report(change, f"tenant {name!r}: {change.tokens} old token(s) refused from now on")


@click.command(name="revoke")
@click.argument("name")
@readable_errors
def tenants_revoke(name: str) -> None:
    """Remove every token of tenant NAME: refused at once (its sessions stay)."""
    with _redis_errors():
        change = _store().revoke(name)
    _report(change, f"tenant {name!r}: {change.tokens} token(s) revoked")


def _report(change: TenantChange, done: str) -> None:
    """Say what was done, and whether every API process dropped its token cache."""
    refreshed = change.refreshed
    err_console.print(f"{done}; {refreshed.confirmed} API process(es) confirmed")
    if not refreshed.complete:
        late = refreshed.listeners - refreshed.confirmed
        err_console.print(
            f"[yellow]warning[/yellow]: {late} API process(es) did not confirm; their "
            "cached tokens expire within SANDGRID_AUTH_CACHE_S",
            highlight=False,
        )


@click.command(name="show")
@click.argument("name")
@readable_errors
def tenants_show(name: str) -> None:
    """Print tenant NAME's limits as JSON (never a token)."""
    with _redis_errors():
        tenant = _store().get(name)
    click.echo(tenant.limits.model_dump_json(indent=2, exclude={"v"}))


@click.command(name="ls")
@readable_errors
def tenants_ls() -> None:
    """List tenants (never tokens)."""
    table = Table("tenant", "max sessions", "max turns", "network", "ceiling")
    with _redis_errors():
        found = _store().tenants()
    for t in found:
        network = "default policy" if t.limits.network_default else "offline"
        ceiling = ",".join(t.limits.network_ceiling) or "-"
        table.add_row(
            t.name,
            str(t.limits.max_sessions),
            str(t.limits.max_concurrent_turns),
            network,
            ceiling,
        )
    Console().print(table)


#: The subcommands of ``sandgrid tenants``, by name.
COMMANDS: dict[str, click.Command] = {
    c.name or "": c
    for c in (tenants_add, tenants_set, tenants_rotate, tenants_revoke, tenants_show, tenants_ls)
}
