"""Printing a streamed turn in a terminal: output as it comes, Ctrl-C cancels.

``sandgrid exec`` hands its ``TurnStream`` here. Chunks are written to the
terminal's stdout and stderr as the command writes them; output the grid could
not stream whole (``dropped``, ``gap``) is flagged, and a turn that streamed
nothing has its result's output printed. The first Ctrl-C cancels the turn and
waits for its result (``cancelled``); a second one leaves at once.
"""

from __future__ import annotations

import sys

from sandgrid.cli.helpers import err_console
from sandgrid.client import TurnStream
from sandgrid.models import ExecResult

__all__ = ["run_streamed"]


def run_streamed(stream: TurnStream) -> ExecResult:
    """Print the turn's output as it arrives; its result."""
    printed = {"stdout": False, "stderr": False}
    whole = True
    with stream:
        try:
            whole = _print(stream, printed)
        except KeyboardInterrupt:
            err_console.print("[yellow]sandgrid: cancelling...[/yellow]")
            stream.cancel()
            whole = _print(stream, printed)
        result = stream.wait()
    if not printed["stdout"]:  # nothing streamed (an empty or unstreamed turn)
        sys.stdout.write(result.stdout)
    if not printed["stderr"]:
        sys.stderr.write(result.stderr)
    if not whole:
        err_console.print("[yellow]sandgrid: some streamed output was dropped[/yellow]")
    return result


def _print(stream: TurnStream, printed: dict[str, bool]) -> bool:
    """Write chunks until the turn ends; False if some output did not arrive."""
    whole = True
    for event in stream:
        if event.type in ("stdout", "stderr"):
            out = sys.stdout if event.type == "stdout" else sys.stderr
            out.write(event.data)
            out.flush()
            printed[event.type] = True
        elif event.type in ("dropped", "gap"):
            whole = False
    return whole
