"""``python -m worker.agent``: the agent from a checkout (the zipapp has its own ``__main__``)."""

from __future__ import annotations

import sys

from .main import main

__all__: list[str] = []

sys.exit(main())
