"""A build's phases timed apart, for one debug line per build (issue 25 measured target).

``template build <id>: base_ms=... start_ms=... steps_ms=... upper_ms=... layer_ms=...
load_ms=... push_ms=... total_ms=...``: times only, never a name, an output or a
value. ``bench/bench_templates.py`` reads these lines from the node's log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Phases"]


class Phases:
    """Wall-clock milliseconds of named phases; a phase timed twice adds up."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t0 = time.perf_counter()
        self._lock = threading.Lock()  # a phase may run beside the build (the sandbox's removal)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            took = (time.perf_counter() - t0) * 1000
            with self._lock:
                self.ms[name] = self.ms.get(name, 0.0) + took

    def line(self) -> str:
        """``name_ms=1.0 ...`` in the order the phases first ended, then ``total_ms``."""
        total = (time.perf_counter() - self._t0) * 1000
        with self._lock:
            parts = [f"{k}_ms={v:.1f}" for k, v in self.ms.items()]
        return " ".join([*parts, f"total_ms={total:.1f}"])
