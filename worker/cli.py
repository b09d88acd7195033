"""The data plane's command, plugged into ``sandgrid`` (entry points ``sandgrid.commands``).

sandgrid worker --types python,python-gvisor --concurrency 4 --node w1
sandgrid worker --types 'python,python-*' --node w2   # and every python-* type added later
"""

from __future__ import annotations

import socket

import click

from sandgrid.cli.helpers import readable_errors

__all__ = ["worker"]


@click.command()
@click.option(
    "--types",
    default="python",
    show_default=True,
    help="sandbox types, comma-separated: names, or patterns (python-*, *) that also "
    "select types added to the catalog later",
)
@click.option("--concurrency", type=int, default=4, show_default=True, help="turns at once")
@click.option("--node", default=None, help="node name, unique in the grid [host name]")
@click.option(
    "--task-log/--no-task-log",
    default=None,
    help="log every turn's received and succeeded lines at INFO "
    "[SANDGRID_WORKER__TASK_LOG, off: DEBUG lines]",
)
@readable_errors
def worker(types: str, concurrency: int, node: str | None, task_log: bool | None) -> None:
    """Run a worker node consuming its direct queue and the types' shared queues."""
    import os

    if task_log is not None:  # before any get_settings() (the imports below make one)
        os.environ["SANDGRID_WORKER__TASK_LOG"] = "true" if task_log else "false"

    from sandgrid.wire.credentials import refusal
    from sandgrid.wire.settings import Settings
    from worker.main import run_worker

    # a fresh Settings: run_worker names the node in the environment before get_settings()
    if (refused := refusal(Settings(), "a worker")) is not None:
        raise click.ClickException(refused)

    names = [t.strip() for t in types.split(",") if t.strip()]
    run_worker(types=names, concurrency=concurrency, node=node or socket.gethostname())
