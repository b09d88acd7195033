"""``python -m sandgrid.cli``: the ``sandgrid`` command."""

from __future__ import annotations

from sandgrid.cli import main

main()
