"""``sandgrid templates``: build a sandbox type on the grid from a base and steps (issue 25.2).

sandgrid templates build -f template.toml     # start the build, follow its log to its end
sandgrid templates build -f template.toml --no-wait
sandgrid templates show node-app              # its state, log and why it failed, as JSON

A template file is the body of ``POST /v1/templates`` in TOML::

    name = "node-app"
    from = "python"
    network = { allow = ["deb.debian.org"] }
    [[steps]]
    run = "apt-get update && apt-get install -y nodejs"
    [[steps]]
    copy = { "/etc/app.conf" = "port = 8080" }

``build`` exits 1 when the build fails (the failed step and its exit code
are printed); the tenant's token is ``SANDGRID_TOKEN``. docs/templates.md.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import click

from sandgrid.cli.helpers import readable_errors
from sandgrid.templates import TemplateInfo

__all__ = ["templates_build", "templates_group", "templates_show"]

_POLL_S = 1.0


@click.group(name="templates")
def templates_group() -> None:
    """Templates: sandbox types built on the grid from a base and steps."""


@templates_group.command(name="build")
@click.option(
    "-f",
    "--file",
    "file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="the template (TOML: name, from, steps, network, quotas)",
)
@click.option("--wait/--no-wait", default=True, show_default=True, help="follow the build")
@readable_errors
def templates_build(file: Path, wait: bool) -> None:
    """Build the template of FILE; with --wait, print its log until it is ready or failed."""
    from sandgrid.client import Client

    with Client() as client:
        info = client.templates.build(tomllib.loads(file.read_text()))
        click.echo(f"{info.name}: building (build {info.build_id})")
        if not wait:
            return
        shown = 0
        while info.state == "building":
            time.sleep(_POLL_S)
            info = client.templates.get(info.name)
            shown = _echo_new(info.log, shown)
    _finish(info)


def _echo_new(log: str, shown: int) -> int:
    """Print what the log gained since ``shown`` characters; the new length."""
    if len(log) > shown:
        click.echo(log[shown:], nl=False)
    return len(log)


def _finish(info: TemplateInfo) -> None:
    if info.state == "ready":
        click.echo(
            f"{info.name}: ready ({info.image} {info.digest}); sessions use type={info.name}"
        )
        return
    where = (
        f" at step {info.failed_step} (exit {info.exit_code})"
        if info.failed_step is not None
        else ""
    )
    click.echo(f"{info.name}: failed{where}: {info.error}", err=True)
    raise SystemExit(1)


@templates_group.command(name="show")
@click.argument("name")
@readable_errors
def templates_show(name: str) -> None:
    """One template's state, log and error, as JSON."""
    from sandgrid.client import Client

    with Client() as client:
        click.echo(client.templates.get(name).model_dump_json(indent=2))
