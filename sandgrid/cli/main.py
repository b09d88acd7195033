"""The ``sandgrid`` command: the group, its own command groups, and the plug-ins.

    sandgrid exec --type python -- python3 -c 'print(1)'
    sandgrid sessions ls | sandgrid sessions close ID
    sandgrid batch run jobs.jsonl --out results.jsonl
    sandgrid bench bfcl
    sandgrid shell SESSION

The grid's own processes add their commands through the ``sandgrid.commands``
entry points of the installed distribution: ``serve`` and ``tenants`` (the
control plane, ``scheduler.cli``), ``worker`` (the data plane, ``worker.cli``).
So the command line never imports the server side. A plain ``pip install
sandgrid`` lists them, but has not their dependencies (uvicorn, redis, docker...):
running one then says which extra to install (``helpers.missing_extra``), never a
``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

import click

from sandgrid.cli.audit import audit
from sandgrid.cli.batch import batch
from sandgrid.cli.bench import bench
from sandgrid.cli.catalog import types_group
from sandgrid.cli.code import code
from sandgrid.cli.helpers import EXTRA_OF_PACKAGE, missing_extra
from sandgrid.cli.lifecycle import add_lifecycle_commands
from sandgrid.cli.processes import ps
from sandgrid.cli.sessions import exec_, sessions
from sandgrid.cli.shell import shell
from sandgrid.cli.templates import templates_group

__all__ = ["PLUGIN_GROUP", "main"]

PLUGIN_GROUP = "sandgrid.commands"
log = logging.getLogger(__name__)


class _PluginGroup(click.Group):
    """A group that also lists the commands of the ``sandgrid.commands`` entry points,
    loading each only when it is listed or run (so ``--help`` of another command
    imports no server code)."""

    def _plugins(self) -> dict[str, str]:
        return {ep.name: ep.value for ep in entry_points(group=PLUGIN_GROUP)}

    def _extra(self, cmd_name: str) -> str:
        """The extra a plug-in command needs, from the package its entry point names."""
        package = self._plugins().get(cmd_name, "").partition(".")[0].partition(":")[0]
        return EXTRA_OF_PACKAGE.get(package, "server")

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; a plug-in missing a package of its extra says which to install."""
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            name = ctx.invoked_subcommand
            if name is None or name not in self._plugins():
                raise
            raise click.ClickException(missing_extra(name, self._extra(name), exc)) from exc

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        for ep in entry_points(group=PLUGIN_GROUP, name=cmd_name):
            try:
                command = ep.load()
            except ImportError as exc:
                raise click.ClickException(
                    missing_extra(cmd_name, self._extra(cmd_name), exc)
                ) from exc
            if isinstance(command, click.Command):
                return command
        return None


@click.group(cls=_PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """sandgrid: a distributed execution grid for AI agents."""


main.add_command(exec_)
main.add_command(sessions)
add_lifecycle_commands(sessions)
main.add_command(batch)
main.add_command(bench)
main.add_command(audit)
main.add_command(code)
main.add_command(shell)
main.add_command(ps)
main.add_command(types_group)
main.add_command(templates_group)  # 25.2
