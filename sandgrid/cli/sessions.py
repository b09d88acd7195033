"""``sandgrid exec`` and ``sandgrid sessions``: use the grid from a shell.

sandgrid exec --type python -- python3 -c 'print(1)'
sandgrid sessions ls | sandgrid sessions close ID
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import EXIT_TIMEOUT, err_console, readable_errors

__all__ = ["exec_", "sessions", "sessions_close", "sessions_ls"]


@click.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.option("--type", "type_", default="python", show_default=True, help="sandbox type")
@click.option("--timeout", type=float, default=None, help="deadline in seconds")
@click.option("--shell", "use_shell", is_flag=True, help="run the words as one shell command")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@readable_errors
def exec_(type_: str, timeout: float | None, use_shell: bool, argv: tuple[str, ...]) -> None:
    """One-shot: create a session, run ARGV, print its output as it is written, close,
    exit with its code. Ctrl-C cancels the command (every process it started)."""
    from sandgrid.cli.streamed import run_streamed
    from sandgrid.client import Client

    with Client() as client, client.session(type=type_) as session:
        if use_shell:
            result = run_streamed(session.exec_stream(shell=" ".join(argv), timeout_s=timeout))
        else:
            result = run_streamed(session.exec_stream(list(argv), timeout_s=timeout))
    for flag, note in (
        (result.stdout_truncated or result.stderr_truncated, "output truncated"),
        (result.oom_killed, "killed: out of memory"),
        (result.cancelled, "cancelled"),
    ):
        if flag:
            err_console.print(f"[yellow]sandgrid: {note}[/yellow]")
    if result.timed_out:
        err_console.print("[yellow]sandgrid: deadline reached, command killed[/yellow]")
        sys.exit(EXIT_TIMEOUT)
    sys.exit(result.exit_code if result.exit_code is not None else 1)


@click.group()
def sessions() -> None:
    """List and close your sessions."""


@sessions.command(name="ls")
@readable_errors
def sessions_ls() -> None:
    """List your sessions that are not closed."""
    from sandgrid.client import Client

    with Client() as client:
        found = client.list_sessions()
    table = Table("id", "type", "state", "owner", "turns", "last used")
    for s in found:
        last = s.last_used.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(s.id, s.type, s.state, s.owner or "-", str(s.turns), last)
    Console().print(table)


@sessions.command(name="close")
@click.argument("session_id")
@readable_errors
def sessions_close(session_id: str) -> None:
    """Close a session; its container is destroyed."""
    from sandgrid.client import Client

    with Client() as client:
        info = client.close_session(session_id)
    Console().print(f"{info.id} {info.state}")
