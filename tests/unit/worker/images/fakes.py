"""A fake engine for the image tests: names resolve from a table; pulls are recorded."""

from __future__ import annotations

import threading
import time

from worker.images.engine import LocalImage, PullFailed

__all__ = ["FakeEngine"]


class FakeEngine:
    """``ImageEngine`` in memory.

    Args:
        present: the names the engine resolves.
        registry: what the registry holds (a pull of another name is ``missing``).
        pull_s: how long a pull takes (to let callers pile up).
        down: the registry is out of reach (every pull fails, not ``missing``).
    """

    def __init__(
        self,
        present: set[str] | None = None,
        registry: set[str] | None = None,
        *,
        pull_s: float = 0.0,
        down: bool = False,
    ) -> None:
        self.present = set(present or ())
        self.registry = set(registry or ())
        self.pull_s = pull_s
        self.down = down
        self.pulls: list[str] = []
        self.local: list[LocalImage] = []
        self.used: set[str] = set()
        self.removed: list[str] = []
        self._lock = threading.Lock()

    def has(self, reference: str) -> bool:
        return reference in self.present

    def pull(self, reference: str) -> None:
        with self._lock:
            self.pulls.append(reference)
        time.sleep(self.pull_s)
        if self.down:
            raise PullFailed("dial tcp 127.0.0.1:5000: connect: connection refused", missing=False)
        if reference not in self.registry:
            raise PullFailed(f"manifest for {reference} not found: manifest unknown", missing=True)
        self.present.add(reference)

    def images(self) -> list[LocalImage]:
        return list(self.local)

    def used_ids(self) -> set[str]:
        return set(self.used)

    def remove(self, reference: str) -> None:
        self.removed.append(reference)
