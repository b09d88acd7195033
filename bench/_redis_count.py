"""The Redis commands one grid's clients send, counted exactly (issue 22.1).

``INFO commandstats`` counts the whole server's commands, so any other client
of the shared Redis (another grid, a test run) is counted too. ``MONITOR``
shows each command with its database and its source (a client's address, or
``lua`` for a command a script ran): counted for the bench's own database, a
figure is the grid's alone, split into round trips and commands run inside
scripts. ``MONITOR`` slows Redis down, so a bench counts over turns of its own,
apart from the turns it times.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.redis_monitor import recorded

__all__ = ["Counted", "counting"]


@dataclass
class Counted:
    """What the grid's clients sent while counting, by ``(source, command)``;
    ``source`` is ``rt`` (a round trip) or ``lua`` (run by a script)."""

    commands: Counter[tuple[str, str]] = field(default_factory=Counter)

    def per(self, n: int) -> tuple[float, float]:
        """Round trips and commands in all (scripts' included) per one of ``n``."""
        rt = sum(v for (src, _), v in self.commands.items() if src == "rt")
        return rt / n, sum(self.commands.values()) / n

    def top(self, n: int, k: int = 10) -> str:
        """The ``k`` commonest ``source:COMMAND`` per one of ``n`` (``k`` 0: all)."""
        common = self.commands.most_common(k or None)
        return ", ".join(f"{s}:{c} {v / n:.1f}" for (s, c), v in common)


@contextlib.contextmanager
def counting(url: str) -> Iterator[Counted]:
    """Count the commands sent to ``url``'s database while inside
    (``tests.support.redis_monitor.recorded``, which the unit tests' budgets use too)."""
    counted = Counted()
    with recorded(url) as seen:
        try:
            yield counted
        finally:
            time.sleep(0.3)  # the last turn's trailing commands (acks, events)
    counted.commands.update((source, name) for source, name, _ in seen)
