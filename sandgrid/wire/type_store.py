"""The catalog of sandbox types in the registry: Redis, with its record in the object store.

Redis holds the live catalog (``names.types_key``: name -> ``SandboxTypeSpec``
JSON) and a version counter (``names.types_version_key``) that every change
moves; processes watch the counter (``sandgrid.wire.catalog.CatalogView``), not
the hash. Like a session's record (``scheduler.registry.records``), the whole
catalog is also written to the object store (``keys.types_record_key``) after
each change, so a Redis that lost its data re-learns the types added by API
from there on the first read (``load``), before any seeding.

Seeding (``seed``, when the API starts) is idempotent: each entry of the types
file replaces a differing copy of the same name, an entry of ``source = file``
that the file no longer names is removed, types added by API are left alone,
and the counter moves only when something changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import ValidationError

from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire import names
from sandgrid.wire.catalog import Catalog
from sandgrid.wire.objects import ObjectStore, keys

if TYPE_CHECKING:
    import redis

__all__ = ["SeedReport", "TypeStore"]

log = logging.getLogger(__name__)


class SeedReport:
    """What one seeding did: the names written and removed."""

    def __init__(self, written: list[str], removed: list[str]) -> None:
        self.written = written
        self.removed = removed


class TypeStore:
    """The registry's catalog (see the module doc).

    Args:
        client: a Redis client created with ``decode_responses=True``.
        objects: the store of the catalog's record (None: Redis alone).
    """

    def __init__(self, client: redis.Redis[str], objects: ObjectStore | None = None) -> None:
        self.redis = client
        self.objects = objects

    # ---- reading ---------------------------------------------------------------

    def version(self) -> int | None:
        """The version counter; None when Redis holds no catalog."""
        raw = self.redis.get(names.types_version_key())
        return None if raw is None else int(raw)

    def load(self) -> Catalog | None:
        """The catalog; re-learned from its record when Redis holds none; None: none anywhere.

        Raises:
            InfrastructureError: ``store_unavailable`` while re-learning.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(names.types_version_key())
        pipe.hgetall(names.types_key())
        version, rows = pipe.execute()
        if version is None:
            return self._relearn()
        return Catalog(_parse(rows.values()), int(version))

    # ---- changing ----------------------------------------------------------------

    def put(self, spec: SandboxTypeSpec) -> int:
        """Add or replace a type; the new version.

        Raises:
            InfrastructureError: ``store_unavailable`` writing the record.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(names.types_key(), spec.name, spec.model_dump_json())
        pipe.incr(names.types_version_key())
        version = int(pipe.execute()[1])
        self._write_record()
        return version

    def delete(self, name: str) -> bool:
        """Remove a type; whether it was there.

        Raises:
            InfrastructureError: ``store_unavailable`` writing the record.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(names.types_key(), name)
        pipe.incr(names.types_version_key())
        removed = bool(pipe.execute()[0])
        self._write_record()
        return removed

    def seed(self, entries: Iterable[SandboxTypeSpec]) -> SeedReport:
        """Make the registry hold the file's ``entries`` (see the module doc).

        Raises:
            InfrastructureError: ``store_unavailable`` re-learning or writing the record.
        """
        if self.version() is None:
            self._relearn()  # a lost Redis gets back the types added by API first
        stored = {t.name: t for t in _parse(self.redis.hgetall(names.types_key()).values())}
        wanted = {t.name: t for t in entries}
        written = [n for n, t in wanted.items() if stored.get(n) != t]
        removed = [n for n, t in stored.items() if t.source == "file" and n not in wanted]
        fresh = self.version() is None
        if not (written or removed or fresh):
            return SeedReport([], [])
        pipe = self.redis.pipeline(transaction=True)
        for name in written:
            pipe.hset(names.types_key(), name, wanted[name].model_dump_json())
        if removed:
            pipe.hdel(names.types_key(), *removed)
        pipe.incr(names.types_version_key())
        pipe.execute()
        self._write_record()
        if written or removed:
            log.info("catalog: seeded %s; removed %s", written or "-", removed or "-")
        return SeedReport(written, removed)

    # ---- the record ------------------------------------------------------------------

    def _write_record(self) -> None:
        if self.objects is None:
            return
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(names.types_version_key())
        pipe.hgetall(names.types_key())
        version, rows = pipe.execute()
        body = {"v": 1, "version": int(version or 0), "types": sorted(rows.values())}
        self.objects.put(keys.types_record_key(), json.dumps(body).encode())

    def _relearn(self) -> Catalog | None:
        """Put the record's catalog back into Redis (unless another process did first)."""
        if self.objects is None:
            return None
        try:
            body = json.loads(self.objects.get(keys.types_record_key()))
        except KeyError:
            return None
        types = _parse(body.get("types", []))
        version = int(body.get("version", 0)) + 1  # past any version a node may have seen
        pipe = self.redis.pipeline(transaction=True)
        for t in types:
            pipe.hsetnx(names.types_key(), t.name, t.model_dump_json())
        pipe.setnx(names.types_version_key(), version)
        pipe.execute()
        log.warning("catalog: re-learned %d types from the object store", len(types))
        current = self.version()
        rows = self.redis.hgetall(names.types_key())
        return Catalog(_parse(rows.values()), current or version)


def _parse(rows: Iterable[str]) -> list[SandboxTypeSpec]:
    """The types of stored rows; a row this version cannot read is skipped (logged)."""
    out = []
    for row in rows:
        try:
            out.append(SandboxTypeSpec.model_validate_json(row))
        except ValidationError:
            log.error("catalog: a stored type does not validate; skipped")
    return out
