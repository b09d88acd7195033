"""``sandgrid types``: the grid's sandbox types (issue 25.1), over the HTTP API.

sandgrid types ls                       # the types you may use, and the nodes serving each
sandgrid types show python-small        # one type's definition, as JSON
sandgrid types add python-small --image sandgrid/sandbox-python:latest --runtime runc \\
    --quota memory_mb=256 --pool-size 1 # an operator's act: the admin token
sandgrid types add -f types.toml        # each [[type]] of a file (the types file's format)
sandgrid types rm python-small          # refused while sessions of it are open

``ls`` and ``show`` take the tenant's token (``SANDGRID_TOKEN``); ``add`` and
``rm`` the operator's admin token, read from ``--admin-token-file``
(``SANDGRID_ADMIN_TOKEN_FILE``), else ``SANDGRID_TOKEN``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import readable_errors
from sandgrid.errors import InvalidInput
from sandgrid.sandbox_types import SandboxTypeInfo

__all__ = ["types_add", "types_group", "types_ls", "types_rm", "types_show"]

_ADMIN = click.option(
    "--admin-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="SANDGRID_ADMIN_TOKEN_FILE",
    default=None,
    help="the operator's admin token [SANDGRID_ADMIN_TOKEN_FILE; else SANDGRID_TOKEN]",
)


def _admin_token(path: Path | None) -> str | None:
    return path.read_text().strip() if path is not None else None


def _pairs(option: str, given: tuple[str, ...]) -> dict[str, float]:
    """``key=number`` options as a mapping.

    Raises:
        InvalidInput: an entry is not ``key=number`` (named with its option).
    """
    out: dict[str, float] = {}
    for entry in given:
        key, sep, value = entry.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = None
        if not sep or number is None:
            raise InvalidInput(
                f"{option}: {entry!r} is not key=number",
                operation="types.add",
                context={"field": option, "rule": "key=number"},
            )
        out[key] = int(number) if number.is_integer() else number
    return out


@click.group(name="types")
def types_group() -> None:
    """The grid's sandbox types: list, show, add, remove."""


def _table(found: list[SandboxTypeInfo]) -> Table:
    """One row a type: name, runtime, image, warm pool, who may use it, its nodes."""
    table = Table("name", "runtime", "image", "pool", "tenant", "nodes")
    for t in found:
        pool = "-" if t.pool_size is None else str(t.pool_size)
        table.add_row(t.name, t.runtime, t.image, pool, t.tenant or "all", ", ".join(t.nodes))
    return table


@types_group.command(name="ls")
@readable_errors
def types_ls() -> None:
    """The types you may use, with their runtime, image and live nodes."""
    from sandgrid.client import Client

    with Client() as client:
        Console().print(_table(client.types()))


@types_group.command(name="show")
@click.argument("name")
@readable_errors
def types_show(name: str) -> None:
    """One type's definition and live nodes, as JSON."""
    from sandgrid.client import Client

    with Client() as client:
        click.echo(client.get_type(name).model_dump_json(indent=2))


@types_group.command(name="add")
@click.argument("name", required=False)
@click.option("-f", "--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--image", help="the image by tag, e.g. sandgrid/sandbox-python:latest")
@click.option("--runtime", type=click.Choice(["runc", "runsc"]), default="runc", show_default=True)
@click.option("--digest", default="", help="the image's digest (default: the grid resolves it)")
@click.option("--quota", "quotas", multiple=True, help="a default quota: key=number")
@click.option("--ceiling", "ceilings", multiple=True, help="a quota's ceiling: key=number")
@click.option("--pool-size", type=int, default=None, help="fewest warm sandboxes per node")
@click.option("--pool-max", type=int, default=None, help="most warm sandboxes per node")
@click.option("--tenant", default=None, help="private to this tenant (default: every tenant)")
@click.option("--network-allowed", is_flag=True, help="sessions may ask for network")
@_ADMIN
@readable_errors
def types_add(
    name: str | None,
    file: Path | None,
    image: str | None,
    runtime: str,
    digest: str,
    quotas: tuple[str, ...],
    ceilings: tuple[str, ...],
    pool_size: int | None,
    pool_max: int | None,
    tenant: str | None,
    network_allowed: bool,
    admin_token_file: Path | None,
) -> None:
    """Add a type NAME (or each [[type]] of -f FILE); nodes start serving it at once."""
    from sandgrid.client import Client

    if file is not None:
        definitions: list[dict[str, Any]] = tomllib.loads(file.read_text()).get("type", [])
    elif name and image:
        definitions = [
            {
                "name": name,
                "image": image,
                "runtime": runtime,
                "digest": digest,
                "quotas": _pairs("--quota", quotas),
                "ceilings": _pairs("--ceiling", ceilings),
                "pool_size": pool_size,
                "pool_max": pool_max,
                "tenant": tenant,
                "network_allowed": network_allowed,
            }
        ]
    else:
        raise click.UsageError("give NAME and --image, or -f FILE")
    with Client(token=_admin_token(admin_token_file)) as client:
        for definition in definitions:
            added = client.add_type(definition)
            click.echo(f"{added.name} added ({added.image} {added.digest or 'no digest'})")


@types_group.command(name="rm")
@click.argument("name")
@_ADMIN
@readable_errors
def types_rm(name: str, admin_token_file: Path | None) -> None:
    """Remove a type; refused (type_in_use) while sessions of it are open."""
    from sandgrid.client import Client

    with Client(token=_admin_token(admin_token_file)) as client:
        removed = client.remove_type(name)
    click.echo(f"{removed.name} removed")
