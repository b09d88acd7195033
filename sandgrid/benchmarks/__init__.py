"""Benchmarks as batch jobs: BFCL multi-turn ground truth and AppWorld tasks.

``bfcl`` and ``appworld`` turn a benchmark's data into ``BatchJob`` lines and
check the results; ``bfcl_entry`` and ``appworld_task`` are the programs those
jobs run inside their sandboxes (read as source text, also runnable on a host).
``sandgrid bench bfcl`` / ``sandgrid bench appworld`` drive them
(``sandgrid.cli.bench``).
"""

from __future__ import annotations

__all__: list[str] = []
