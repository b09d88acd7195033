"""``sandgrid code``: run code in a session's Jupyter kernel from a shell.

sandgrid code SESSION 'x = 1'
sandgrid code SESSION 'x + 1'      # prints 2: the kernel keeps its state
echo 'print(x)' | sandgrid code SESSION -
"""

from __future__ import annotations

import sys

import click

from sandgrid.cli.helpers import EXIT_TIMEOUT, err_console, readable_errors

__all__ = ["code"]


@click.command(name="code")
@click.argument("session_id")
@click.argument("source")
@click.option("--timeout", type=float, default=None, help="deadline in seconds")
@readable_errors
def code(session_id: str, source: str, timeout: float | None) -> None:
    """Run SOURCE (``-`` reads stdin) in SESSION's kernel; print its outputs.

    Exits 1 when the code raised, 124 at its deadline.
    """
    from sandgrid.client import Client

    text = sys.stdin.read() if source == "-" else source
    with Client() as client:
        result = client.run_code(session_id, text, timeout_s=timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.result is not None:
        sys.stdout.write(result.result + "\n")
    for bundle in result.display:
        kinds = ", ".join(sorted(bundle))
        err_console.print(f"[cyan]sandgrid: display data ({kinds})[/cyan]", highlight=False)
    if result.kernel_restarted:
        err_console.print("[yellow]sandgrid: the kernel was restarted; its state is gone[/yellow]")
    if result.error is not None:
        sys.stderr.write("\n".join(result.error.traceback or [result.error.name]) + "\n")
    if result.timed_out:
        sys.exit(EXIT_TIMEOUT)
    sys.exit(1 if result.error is not None else 0)
