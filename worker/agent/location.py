"""Where this package lives: the command line of a helper host that runs one of its modules.

The kernel host (``kernel``) and the launcher host (``launcher``) are Python
processes started from this same package, in a zipapp or in a checkout. The
lookup is here, below both, so that neither imports the other for it: the
launcher sits under ``processes``, which the kernel imports.
"""

from __future__ import annotations

import os
import sys

__all__ = ["module_command"]


def module_command(module: str, *flags: str) -> tuple[list[str], str]:
    """The argv that runs ``module`` of this package (``python [flags] -m pkg.module``)
    and the ``PYTHONPATH`` that finds the package."""
    package = __package__ or "sandgrid_agent"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for _ in range(package.count(".")):
        root = os.path.dirname(root)
    return [sys.executable, *flags, "-m", f"{package}.{module}"], root
