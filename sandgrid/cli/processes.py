"""``sandgrid ps SESSION``: the background processes of a session, from a shell.

sandgrid ps s-abc123
"""

from __future__ import annotations

import time

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import readable_errors

__all__ = ["ps"]


@click.command(name="ps")
@click.argument("session_id")
@readable_errors
def ps(session_id: str) -> None:
    """List a session's background processes, running or finished."""
    from sandgrid.client import Client

    with Client() as client:
        found = client.processes(session_id)
    table = Table("pid", "state", "exit", "started", "output", "command")
    for p in found:
        state = "running" if p.running else "exited"
        code = "-" if p.running else (str(p.exit_code) if p.signal is None else f"sig {p.signal}")
        started = time.strftime("%H:%M:%S", time.localtime(p.started_at))
        table.add_row(str(p.pid), state, code, started, str(p.output_end), " ".join(p.argv))
    Console().print(table)
