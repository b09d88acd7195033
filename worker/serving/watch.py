"""The node follows the catalog: it starts and stops serving types without a restart.

A node's ``--types`` select types by name or by pattern (``python``,
``python-*``, ``*``: ``fnmatch``). Every ``interval_s`` the watch looks at the
catalog's version counter (one Redis ``GET``, ``sandgrid.wire.catalog``); when it
moved, or every ``recheck_s`` for types it could not serve yet (an image not
built, a runtime missing), it compares what the selector names with what the
node serves: a type that left the catalog is stopped, a changed one is started
again in place (its queues never stop, its heartbeat never drops it), a
selected type the node can serve (``worker.serving.ability``) is started. What
starting and stopping mean (queues, warm pool, heartbeat) is the node's
(``worker.node.Node.start_serving``, ``stop_serving``).
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Callable, Sequence

from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire.catalog import Catalog, CatalogView
from sandgrid.wire.periodic import Periodic

__all__ = ["RECHECK_S", "TypeWatch", "is_pattern", "selected"]

log = logging.getLogger(__name__)

#: How often types selected but not servable are checked again (s).
RECHECK_S = 10.0


def is_pattern(entry: str) -> bool:
    """Whether a ``--types`` entry is a pattern, not a name."""
    return any(c in entry for c in "*?[")


def selected(selector: Sequence[str], catalog: Catalog) -> list[str]:
    """The catalog's types that ``selector`` names, in the selector's order, once each."""
    out: list[str] = []
    for entry in selector:
        matches = fnmatch.filter(sorted(catalog.types), entry) if is_pattern(entry) else [entry]
        out += [m for m in matches if m in catalog and m not in out]
    return out


class TypeWatch:
    """Keeps the node's served types in step with the catalog (see the module doc).

    Args:
        selector: the node's ``--types`` entries.
        view: this process's view of the catalog.
        serving: the types the node serves now, with their definitions.
        check: why the node cannot serve a type (None: it can).
        start: serve a type (also called again when its definition changed).
        stop: stop serving a type.
        interval_s: between looks at the catalog's version.
        recheck_s: between checks of the types it could not serve yet.
    """

    def __init__(
        self,
        selector: Sequence[str],
        view: CatalogView,
        *,
        serving: Callable[[], dict[str, SandboxTypeSpec]],
        check: Callable[[SandboxTypeSpec], str | None],
        start: Callable[[SandboxTypeSpec], None],
        stop: Callable[[str], None],
        interval_s: float,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self.selector = list(selector)
        self.view = view
        self.serving = serving
        self.check = check
        self.start_type = start
        self.stop_type = stop
        self.recheck_s = recheck_s
        self._seen: int | None = None
        self._checked = float("-inf")
        self._refused: dict[str, str] = {}
        self._started = False
        self._loop = Periodic(self.sync, interval_s, "types-watch", log)

    def sync(self) -> None:
        """One look: stop what left, start what the node can serve now."""
        catalog = self.view.refresh()
        moved = catalog.version != self._seen
        if not moved and time.monotonic() - self._checked < self.recheck_s:
            return
        self._seen, self._checked = catalog.version, time.monotonic()
        wanted = {n: catalog.types[n] for n in selected(self.selector, catalog)}
        now = self.serving()
        first, self._started = not self._started, True
        for name, spec in now.items():
            if name not in wanted or (first and self._cannot(spec)):
                self.stop_type(name)
                log.info("types: stopped serving %s", name)
            elif wanted[name] != spec:  # changed: served on, in place (no gap in its queues)
                self.start_type(wanted[name])
        for name, spec in wanted.items():
            if name not in now:
                self._try_start(spec)

    def _cannot(self, spec: SandboxTypeSpec) -> bool:
        """Whether the node cannot serve ``spec`` now (said once per reason)."""
        reason = self.check(spec)
        if reason is None:
            self._refused.pop(spec.name, None)
            return False
        if self._refused.get(spec.name) != reason:
            log.warning("types: cannot serve %s: %s", spec.name, reason)
        self._refused[spec.name] = reason
        return True

    def _try_start(self, spec: SandboxTypeSpec) -> None:
        if self._cannot(spec):
            return
        self.start_type(spec)
        log.info("types: serving %s (%s, %s)", spec.name, spec.image, spec.runtime)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
