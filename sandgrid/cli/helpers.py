"""What every ``sandgrid`` command shares: readable errors and the consoles."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape

from sandgrid.errors import SandgridError

__all__ = ["EXIT_INTERRUPTED", "EXIT_TIMEOUT", "err_console", "readable_errors"]

F = TypeVar("F", bound=Callable[..., Any])
err_console = Console(stderr=True, soft_wrap=True)
#: Exit status of ``sandgrid exec`` when the command hit its deadline (as timeout(1)).
EXIT_TIMEOUT = 124
#: Exit status after Ctrl-C or SIGTERM (128 + SIGINT).
EXIT_INTERRUPTED = 130


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
