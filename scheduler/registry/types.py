"""The API's operations on the catalog of sandbox types: list, show, add, remove, seed.

The catalog itself is the wire's (``sandgrid.wire.type_store``: Redis with its
record in the object store); this adds what only the control plane does:
resolving an image's digest when a type is added or seeded
(``sandgrid.wire.image_digest``), refusing a removal while sessions of the type
are open (409 with their count), and hiding a tenant's private type from every
other tenant (404, as for an unknown name). After each change the process's
view (``sandgrid.wire.catalog``) is read again, so its next request sees it;
other processes see it within their view's ``cache_s``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandgrid.errors import Conflict, ErrorCode, InvalidInput
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire import names
from sandgrid.wire.catalog import Catalog, CatalogView
from sandgrid.wire.image_digest import resolve_digest
from sandgrid.wire.type_store import SeedReport, TypeStore
from sandgrid.wire.types_file import load_types_file

if TYPE_CHECKING:
    import redis

__all__ = ["DigestResolver", "TypeCatalog"]

log = logging.getLogger(__name__)

DigestResolver = Callable[[str], str]
"""An image's digest by tag (``""``: unknown); ``resolve_digest`` by default."""


class TypeCatalog:
    """The catalog as the API serves it.

    Args:
        store: the registry's catalog.
        view: this process's view of it (refreshed after each change).
        resolve: an image's digest by tag.
    """

    def __init__(
        self, store: TypeStore, view: CatalogView, *, resolve: DigestResolver = resolve_digest
    ) -> None:
        self.store = store
        self.view = view
        self.resolve = resolve

    @property
    def redis(self) -> redis.Redis[str]:
        return self.store.redis

    def current(self) -> Catalog:
        return self.view.current()

    def get(self, name: str, tenant: str | None) -> SandboxTypeSpec:
        """The type ``name`` as ``tenant`` sees it (None: an operator, who sees all).

        Raises:
            NotFound: unknown, or another tenant's private type.
        """
        return self.current().find(name, tenant, "types.get")

    def add(self, spec: SandboxTypeSpec) -> SandboxTypeSpec:
        """Add a type (``source = api``), its digest resolved unless given.

        Raises:
            InvalidInput: the name is taken, or the image's digest cannot be found.
        """
        if spec.name in self.view.refresh():
            raise InvalidInput(
                f"name: sandbox type {spec.name!r} exists; remove it first",
                operation="types.add",
                context={"field": "name", "rule": "a new type name"},
            )
        digest = spec.digest or self.resolve(spec.image)
        if not digest:
            raise InvalidInput(
                f"image: the grid's Docker engine has no image {spec.image!r}; "
                "build or pull it, or give its digest",
                operation="types.add",
                context={"field": "image", "rule": "an image the grid has, or a digest"},
            )
        added = spec.model_copy(update={"digest": digest, "source": "api"})
        self.store.put(added)
        self.view.refresh()
        log.info("catalog: type %s added (%s, %s)", added.name, added.image, added.runtime)
        return added

    def remove(self, name: str) -> SandboxTypeSpec:
        """Remove a type no open session uses.

        Raises:
            NotFound: no such type.
            Conflict: sessions of the type are open (their count in the message and context).
        """
        found = self.view.refresh().find(name, None, "types.remove")
        in_use = self.sessions_of(name)
        if not in_use:
            # Deleted first, counted again after: a session created meanwhile is either
            # counted then or refused by the create script, which checks the type
            # atomically with its insert (lua/create_session.lua); never both missed.
            self.store.delete(name)
            in_use = self.sessions_of(name)
            if in_use:
                self.store.put(found)  # put back as it was; creates refused meanwhile
        self.view.refresh()
        if in_use:
            raise Conflict(
                code=ErrorCode.TYPE_IN_USE,
                message=f"type {name!r} is used by {in_use} open session(s); close them first",
                operation="types.remove",
                context={"type": name, "sessions": in_use},
            )
        log.info("catalog: type %s removed", name)
        return found

    def sessions_of(self, name: str) -> int:
        """How many sessions of type ``name`` are open (not closed), all tenants."""
        count = 0
        pattern = names.tenant_sessions_key("*")
        for key in self.redis.scan_iter(match=pattern, count=500):
            ids = sorted(self.redis.smembers(key))
            pipe = self.redis.pipeline(transaction=False)
            for sid in ids:
                pipe.hget(names.session_key(sid), "type")
            count += sum(1 for raw in pipe.execute() if raw is not None and json.loads(raw) == name)
        return count

    def seed(self, path: Path | None) -> SeedReport:
        """Seed the registry from the types file (when the API starts); idempotent.

        Digests are resolved for entries that give none; an image the engine does
        not have keeps an empty digest and a warning (a benchmark's image may not
        be built), never a failed start.

        Raises:
            InvalidInput: the file breaks a rule (the entry and field named).
        """
        entries = []
        for spec in load_types_file(path):
            digest = spec.digest or self.resolve(spec.image)
            if not digest:
                log.warning(
                    "catalog: no digest for %s (%s): not on this engine", spec.name, spec.image
                )
            entries.append(spec.model_copy(update={"digest": digest}))
        report = self.store.seed(entries)
        self.view.refresh()
        return report
