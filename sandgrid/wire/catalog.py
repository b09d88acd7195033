"""The sandbox types the grid offers, as this process sees them: data, not code.

A type name is the unit of routing (queue ``sbx.<type>``) and of warm pools.
The catalog lives in the registry (``sandgrid.wire.type_store``: Redis, with its
record in the object store), seeded from the operators' types file
(``deploy/types.toml``, ``sandgrid.wire.types_file``). Each process reads it
through one ``CatalogView``: a snapshot (``Catalog``) kept until the registry's
version counter moves, looked at every ``cache_s``, so a type added or removed
by ``POST``/``DELETE /v1/types`` reaches every API process and every node
without a restart. Until a process installs a view over the registry
(``install``: the API when it starts, a worker node when it starts), and while
the registry holds no catalog, the view is the types file itself: the
shipped types (``python``, ``python-gvisor``, ``bfcl``, ``appworld``, ``browser``:
headless Chromium's DevTools Protocol, ``sandgrid.wire.browser``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

import redis

from sandgrid.errors import InvalidInput, NotFound, SandgridError
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire.types_file import load_types_file

__all__ = [
    "PRIVATE_LABEL",
    "Catalog",
    "CatalogSource",
    "CatalogView",
    "current",
    "file_catalog",
    "get_type",
    "install",
    "metric_image",
    "metric_type",
    "view",
]

log = logging.getLogger(__name__)


class Catalog:
    """One version of the catalog: its types by name. Never changed once made.

    Args:
        types: the types.
        version: the registry's version counter it was read at (0: not from a registry).
    """

    def __init__(self, types: Iterable[SandboxTypeSpec] = (), version: int = 0) -> None:
        self.types: dict[str, SandboxTypeSpec] = {t.name: t for t in types}
        self.version = version

    def __contains__(self, name: object) -> bool:
        return name in self.types

    def get(self, name: str) -> SandboxTypeSpec | None:
        """The type called ``name``, or None."""
        return self.types.get(name)

    def visible(self, tenant: str | None) -> list[SandboxTypeSpec]:
        """The types ``tenant`` may use, by name (None: an operator, every type)."""
        return sorted((t for t in self.types.values() if t.visible_to(tenant)), key=_name)

    def find(self, name: str, tenant: str | None, operation: str) -> SandboxTypeSpec:
        """The type ``name`` as ``tenant`` may see it.

        Raises:
            NotFound: no such type, or another tenant's private type (the same
                answer, so private types cannot be probed); the message lists the
                types the tenant may use.
        """
        found = self.types.get(name)
        if found is None or not found.visible_to(tenant):
            known = ", ".join(t.name for t in self.visible(tenant))
            raise NotFound(
                f"type: unknown sandbox type {name!r}; known types: {known}",
                operation=operation,
                context={"field": "type", "rule": "known sandbox type", "value": name},
            )
        return found


def _name(t: SandboxTypeSpec) -> str:
    return t.name


class CatalogSource(Protocol):
    """Where the registry keeps the catalog (``sandgrid.wire.type_store.TypeStore``)."""

    def version(self) -> int | None:
        """The catalog's version counter; None when the registry holds no catalog."""
        ...

    def load(self) -> Catalog | None:
        """The catalog, re-learned from its record if Redis lost it; None: none anywhere."""
        ...


def file_catalog(path: Path | None = None) -> Catalog:
    """The types file's catalog (``SANDGRID_TYPES_FILE`` when ``path`` is None)."""
    if path is None:
        from sandgrid.wire.settings import get_settings

        path = get_settings().types_file
    return Catalog(load_types_file(path))


class CatalogView:
    """The catalog as one process sees it: cached, refreshed when its version moves.

    Args:
        source: the registry's catalog; None: the fallback alone.
        fallback: the catalog while the registry holds none (the types file's).
        cache_s: how long a snapshot serves before the version is looked at again.
    """

    def __init__(
        self,
        source: CatalogSource | None = None,
        *,
        fallback: Callable[[], Catalog] = file_catalog,
        cache_s: float = 1.0,
    ) -> None:
        self.source = source
        self.fallback = fallback
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None
        self._checked = float("-inf")

    def current(self) -> Catalog:
        """The catalog, at most ``cache_s`` behind the registry's version counter.

        A registry that cannot be read keeps the last snapshot, or gives the
        types file before any was read (logged): a Redis outage must not make
        every type unknown.
        """
        with self._lock:
            if self._catalog is not None and time.monotonic() - self._checked < self.cache_s:
                return self._catalog
            self._checked = time.monotonic()
            try:
                self._catalog = self._read()
            except (redis.RedisError, SandgridError) as exc:
                if self._catalog is None:  # nothing read yet: the types file, until it answers
                    log.warning(
                        "catalog: cannot read the registry (%s); using the types file",
                        type(exc).__name__,
                    )
                    self._catalog = self.fallback()
                    return self._catalog
                log.warning(
                    "catalog: cannot read the registry's version (%s); keeping v%d",
                    type(exc).__name__,
                    self._catalog.version,
                )
            return self._catalog

    def refresh(self) -> Catalog:
        """Read the registry now (after this process changed the catalog)."""
        with self._lock:
            self._checked = float("-inf")
        return self.current()

    def _read(self) -> Catalog:
        if self.source is None:
            return self._catalog if self._catalog is not None else self.fallback()
        version = self.source.version()
        if self._catalog is not None and version is not None and version == self._catalog.version:
            return self._catalog
        loaded = self.source.load()  # re-learned from its record when Redis lost it
        return loaded if loaded is not None else self.fallback()


_view = CatalogView()


def install(new: CatalogView) -> None:
    """Make ``new`` this process's view of the catalog (API and node start-up)."""
    global _view
    _view = new


def view() -> CatalogView:
    """This process's view of the catalog."""
    return _view


def current() -> Catalog:
    """This process's catalog now (``CatalogView.current``)."""
    return _view.current()


#: What metrics say for a tenant's private type (or one the catalog no longer has).
PRIVATE_LABEL = "private"


def metric_type(name: str) -> str:
    """A type's name as a metric label: an operator's type by its name, else ``private``.

    A tenant names its templates: its names (and its id, in a template's
    repository) stay out of the metrics, and however many types tenants make,
    the series do not grow with them.
    """
    found = current().get(name)
    return name if found is not None and found.tenant is None else PRIVATE_LABEL


def metric_image(image: str, repository: str) -> str:
    """``repository`` as a metric label, or ``private`` when only tenants' types name ``image``."""
    owners = {t.tenant for t in current().types.values() if t.image == image}
    return PRIVATE_LABEL if owners and None not in owners else repository


def get_type(name: str) -> SandboxTypeSpec:
    """The sandbox type called ``name``, whoever may use it.

    Raises:
        InvalidInput: no such type; the message lists the known ones.
    """
    catalog = current()
    found = catalog.get(name)
    if found is None:
        raise InvalidInput(
            f"type: unknown sandbox type {name!r}; known types: {', '.join(sorted(catalog.types))}",
            context={"field": "type", "rule": "known sandbox type", "value": name},
        )
    return found
