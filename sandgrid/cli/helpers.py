"""What every ``sandgrid`` command shares: readable errors, the consoles, install hints."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape

from sandgrid.errors import SandgridError

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TIMEOUT",
    "EXTRA_OF_PACKAGE",
    "err_console",
    "missing_extra",
    "readable_errors",
]

F = TypeVar("F", bound=Callable[..., Any])
err_console = Console(stderr=True, soft_wrap=True)
#: Exit status of ``sandgrid exec`` when the command hit its deadline (as timeout(1)).
EXIT_TIMEOUT = 124
#: Exit status after Ctrl-C or SIGTERM (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: The extra (pyproject ``[project.optional-dependencies]``) whose packages each side's
#: commands import: ``pip install sandgrid`` ships their code but not their dependencies.
EXTRA_OF_PACKAGE = {"scheduler": "server", "worker": "worker"}


def readable_errors(fn: F) -> F:
    """Print a ``SandgridError`` as ``error[code]: message`` and exit 1, never a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SandgridError as exc:
            where = escape(f"[{exc.code}]")
            err_console.print(
                f"[red]error{where}[/red]: {escape(exc.message)}", highlight=False, soft_wrap=True
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def missing_extra(command: str, extra: str, exc: ImportError) -> str:
    """What to say when ``sandgrid COMMAND`` lacks a package of its extra: the missing
    module and the one ``pip install`` that brings it (as the SDK says for its own
    optional packages), instead of a ``ModuleNotFoundError`` traceback."""
    missing = exc.name or str(exc)
    return (
        f"`sandgrid {command}` needs the {extra!r} extra ({missing} is not installed): "
        f"pip install 'sandgrid[{extra}]'"
    )
