"""The ``sandgrid`` command line (``python -m sandgrid.cli``).

Modules import one way: ``main`` imports the command modules, which import
``helpers``; none imports ``main``.
"""

from __future__ import annotations

from sandgrid.cli.main import main

__all__ = ["main"]
