"""The catalog in the registry (25.1): seeding is idempotent, the file wins, API types stay,
and the record in the object store brings them back after Redis lost them."""

from __future__ import annotations

from pathlib import Path

import redis

from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire import names
from sandgrid.wire.catalog import CatalogView
from sandgrid.wire.objects.local import LocalObjects
from sandgrid.wire.type_store import TypeStore


def _spec(name: str, source: str = "file", **kw: object) -> SandboxTypeSpec:
    fields = {"name": name, "image": "a/b:1", "runtime": "runc", "source": source, **kw}
    return SandboxTypeSpec.model_validate(fields)


def test_seeding_twice_changes_nothing_the_second_time(
    redis_client: redis.Redis[str], tmp_path: Path
) -> None:
    store = TypeStore(redis_client, LocalObjects(tmp_path))
    first = store.seed([_spec("python"), _spec("bfcl")])
    assert sorted(first.written) == ["bfcl", "python"] and store.version() == 1
    again = store.seed([_spec("python"), _spec("bfcl")])
    assert again.written == [] and again.removed == [] and store.version() == 1


def test_the_file_wins_and_api_types_stay(redis_client: redis.Redis[str], tmp_path: Path) -> None:
    store = TypeStore(redis_client, LocalObjects(tmp_path))
    store.seed([_spec("python"), _spec("old")])
    store.put(_spec("mine", source="api", pool_size=1))
    report = store.seed([_spec("python", pool_size=3)])
    assert report.written == ["python"] and report.removed == ["old"]
    loaded = store.load()
    assert loaded is not None and set(loaded.types) == {"python", "mine"}
    assert loaded.types["python"].pool_size == 3 and loaded.types["mine"].pool_size == 1


def test_a_lost_redis_relearns_the_catalog_from_its_record(
    redis_client: redis.Redis[str], tmp_path: Path
) -> None:
    objects = LocalObjects(tmp_path)
    store = TypeStore(redis_client, objects)
    store.seed([_spec("python")])
    store.put(_spec("mine", source="api"))
    seen = store.version()
    redis_client.flushdb()
    assert store.version() is None
    back = store.load()
    assert back is not None and set(back.types) == {"python", "mine"}
    assert seen is not None and back.version > seen  # every watcher sees a change
    assert redis_client.hexists(names.types_key(), "mine")
    store.seed([_spec("python")])  # the next start keeps the type added by API
    assert set(store.load().types) == {"python", "mine"}  # type: ignore[union-attr]


def test_a_view_follows_the_version_and_falls_back_on_the_file(
    redis_client: redis.Redis[str], tmp_path: Path
) -> None:
    store = TypeStore(redis_client, None)
    view = CatalogView(store, cache_s=0)
    assert set(view.current().types) == {
        "python",
        "python-gvisor",
        "node",
        "devbox",
        "bfcl",
        "appworld",
        "browser",
    }
    store.seed([_spec("python")])
    assert set(view.current().types) == {"python"}
    store.put(_spec("python-small", source="api"))
    assert "python-small" in view.current()
    store.delete("python-small")
    assert "python-small" not in view.current()
