"""Session records in the object store, and a registry that re-learns from them.

Real Redis (the test database), the local object store, the worker's own
pointer writer (so the reader here cannot drift from it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from sandgrid.models import Quotas, SessionCreate
from sandgrid.wire import names
from sandgrid.wire.objects import LocalObjects, keys
from sandgrid.wire.settings import Settings, WorkerSettings
from scheduler.cli import admin
from scheduler.registry.records import SessionRecords
from scheduler.registry.sessions import SessionRegistry
from tests.support.fakes import Grid
from worker.snapshots import pointer
from worker.snapshots.format.manifest import Manifest


@pytest.fixture
def records(tmp_path: Path) -> SessionRecords:
    return SessionRecords(LocalObjects(tmp_path / "store"))


@pytest.fixture
def registry(redis_client: redis.Redis[str], records: SessionRecords) -> SessionRegistry:
    return SessionRegistry(redis_client, records=records)


def _snapshot(objects: LocalObjects, tenant: str, sid: str, seq: int) -> str:
    """Advance the session's pointer as a worker does; the snapshot's name."""
    manifest = Manifest(
        tenant=tenant,
        session_id=sid,
        seq=seq,
        snapshot_id=f"{seq:012x}",
        created=0.0,
        parent=None,
        roots=(),
        entries=(),
        hash="0" * 64,
        where={},
        blobs={},
    )
    pointer.advance(objects, manifest, pointer.read(objects, tenant, sid), keep=5)
    return manifest.name


def _new(registry: SessionRegistry, tenant: str = "acme", **spec: Any) -> str:
    info = registry.create(tenant, SessionCreate(type="python", **spec))
    registry.save_record(info)
    return info.id


def test_record_is_kept_beside_the_snapshots(
    registry: SessionRegistry, records: SessionRecords
) -> None:
    sid = _new(registry, env={"A": "1"}, labels={"run": "7"}, quotas=Quotas(memory_mb=256))
    assert records.objects.exists(keys.record_key("acme", sid))
    record = records.load("acme", sid)
    assert record is not None and not record.closed
    assert record.session.env == {"A": "1"} and record.session.labels == {"run": "7"}
    assert record.session.quotas.memory_mb == 256 and record.session.type == "python"
    registry.close_record("acme", sid)
    closed = records.load("acme", sid)
    assert closed is not None and closed.closed


def test_lost_session_is_relearned_with_its_latest_snapshot(
    registry: SessionRegistry, records: SessionRecords, redis_client: redis.Redis[str]
) -> None:
    sid = _new(registry, snapshot_policy="on_idle")
    assert isinstance(records.objects, LocalObjects)
    _snapshot(records.objects, "acme", sid, 1)
    latest = _snapshot(records.objects, "acme", sid, 2)
    redis_client.flushdb()
    info = registry.get("acme", sid)
    assert info.snapshot == latest and info.state == "idle" and info.tenant == "acme"
    assert info.snapshot_policy == "on_idle"
    assert redis_client.sismember(names.tenant_sessions_key("acme"), sid)
    assert [s.id for s in registry.list("acme")] == [sid]


def test_relearning_never_crosses_tenants_nor_revives_closed(
    registry: SessionRegistry, redis_client: redis.Redis[str]
) -> None:
    from sandgrid.errors import NotFound

    mine, closed = _new(registry), _new(registry)
    registry.close(closed)
    registry.close_record("acme", closed)
    redis_client.flushdb()
    with pytest.raises(NotFound):
        registry.get("globex", mine)
    with pytest.raises(NotFound):
        registry.get("acme", closed)
    with pytest.raises(NotFound):
        registry.get("acme", "../acme/s/" + mine)
    assert not redis_client.exists(names.session_key(closed))
    assert registry.get("acme", mine).state == "new"


def test_a_record_naming_another_tenant_is_ignored(
    registry: SessionRegistry, records: SessionRecords, redis_client: redis.Redis[str]
) -> None:
    from sandgrid.errors import NotFound

    sid = _new(registry, tenant="globex")
    stored = records.objects.get(keys.record_key("globex", sid))
    records.objects.put(keys.record_key("acme", sid), stored)  # planted under acme
    redis_client.flushdb()
    with pytest.raises(NotFound):
        registry.get("acme", sid)
    records.objects.put(keys.record_key("acme", "s-junk"), b"{not json")
    assert records.load("acme", "s-junk") is None


def test_rebuild_relearns_every_tenant_once(
    registry: SessionRegistry, redis_client: redis.Redis[str]
) -> None:
    a, b, gone = _new(registry), _new(registry, tenant="globex"), _new(registry)
    registry.close(gone)
    registry.close_record("acme", gone)
    redis_client.flushdb()
    first = registry.rebuild()
    assert (first.relearned, first.known, first.closed) == (2, 0, 1)
    assert {s.id for s in registry.list("acme")} == {a}
    assert {s.id for s in registry.list("globex")} == {b}
    again = registry.rebuild()
    assert (again.relearned, again.known, again.closed) == (0, 2, 1)


def test_relearning_twice_keeps_the_first_entry(
    registry: SessionRegistry, redis_client: redis.Redis[str]
) -> None:
    sid = _new(registry)
    redis_client.flushdb()
    assert registry.relearn("acme", sid) is not None
    registry.update(sid, turns=3)
    info = registry.relearn("acme", sid)
    assert info is not None and info.turns == 3


def test_api_create_and_close_keep_the_record(grid: Grid) -> None:
    h = grid.headers()
    sid = grid.http.post("/v1/sessions", json={"type": "python"}, headers=h).json()["id"]
    lost = [names.session_key(sid), names.tenant_sessions_key("acme")]
    grid.services.redis.delete(*lost)  # the registry lost it (the tokens are kept)
    got = grid.http.get(f"/v1/sessions/{sid}", headers=h)
    assert got.status_code == 200 and got.json()["id"] == sid
    theirs = grid.http.get(f"/v1/sessions/{sid}", headers=grid.headers(grid.token_b))
    assert theirs.status_code == 404
    grid.services.redis.delete(*lost)
    ran = grid.http.post(f"/v1/sessions/{sid}/exec", json={"argv": ["echo", "hi"]}, headers=h)
    assert ran.status_code == 200, ran.text
    assert grid.http.delete(f"/v1/sessions/{sid}", headers=h).status_code == 200
    grid.services.redis.delete(*lost)
    assert grid.http.get(f"/v1/sessions/{sid}", headers=h).status_code == 404


def test_admin_rebuild_command(
    tmp_path: Path,
    registry: SessionRegistry,
    redis_client: redis.Redis[str],
    test_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = {_new(registry) for _ in range(3)}
    redis_client.flushdb()
    worker = WorkerSettings(snapshot_store="local", local_snapshot_dir=tmp_path / "store")
    settings = test_settings.model_copy(update={"worker": worker})
    monkeypatch.setattr("sandgrid.wire.settings.get_settings", lambda: settings)
    out = CliRunner().invoke(admin, ["rebuild"])
    assert out.exit_code == 0, out.output
    assert "re-learned 3 sessions; skipped 0" in out.output
    assert {s.id for s in registry.list("acme")} == ids
    again = CliRunner().invoke(admin, ["rebuild"])
    assert "re-learned 0 sessions; skipped 3 (3 known to Redis" in again.output


def test_admin_is_a_command_of_sandgrid() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).parents[4] / "pyproject.toml").read_text())
    commands = project["project"]["entry-points"]["sandgrid.commands"]
    assert commands["admin"] == "scheduler.cli:admin"
    assert "rebuild" in admin.commands
    assert "minio" in " ".join(project["project"]["optional-dependencies"]["server"])
