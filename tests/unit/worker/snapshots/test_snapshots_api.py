"""The public surface of ``worker.snapshots``: exports, settings, the backend contract."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import worker.snapshots
from sandgrid.errors import InvalidInput
from sandgrid.wire.objects import LocalObjects
from sandgrid.wire.settings import Settings, SnapshotSettings, WorkerSettings
from worker.snapshots import DEFAULT_ROOTS, SandboxFiles, open_store

MODULES = sorted(m.name for m in pkgutil.iter_modules(worker.snapshots.__path__))


@pytest.mark.parametrize("name", ["", *MODULES])
def test_all_is_declared_and_resolves(name: str) -> None:
    module = importlib.import_module("worker.snapshots" + (f".{name}" if name else ""))
    assert hasattr(module, "__all__")
    for member in module.__all__:
        assert getattr(module, member) is not None, member


def test_importing_the_package_does_not_need_minio() -> None:
    code = "import sys, worker.snapshots; sys.exit('minio' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_roots_are_the_agents() -> None:
    agent_api = pytest.importorskip("worker.sandboxes.files")
    assert tuple(agent_api.SNAPSHOT_ROOTS) == DEFAULT_ROOTS


def test_the_sandbox_backend_offers_what_snapshots_call() -> None:
    """``worker.sandboxes.files.AgentFiles`` (every ``SandboxManager``'s ``files``) has
    scan/pack/unpack with our parameters."""
    files = pytest.importorskip("worker.sandboxes.files")
    for name in ("scan", "pack", "unpack"):
        ours = list(inspect.signature(getattr(SandboxFiles, name)).parameters)
        theirs = list(inspect.signature(getattr(files.AgentFiles, name)).parameters)
        assert theirs == ours, name


def test_the_agent_channel_and_the_test_double_are_sandbox_files() -> None:
    """One interface: the production backend and the host-directory double implement it."""
    files = pytest.importorskip("worker.sandboxes.files")
    from tests.support.hostdir import HostDirBackend

    assert issubclass(files.AgentFiles, SandboxFiles)
    assert issubclass(HostDirBackend, SandboxFiles)
    assert not inspect.isabstract(HostDirBackend)
    assert SandboxFiles.__abstractmethods__ == {
        "scan",
        "pack",
        "unpack",
        "read_range",
        "write_range",
    }


def test_open_store_follows_the_settings(tmp_path: Path) -> None:
    snaps = SnapshotSettings(keep=7, gc_grace_s=120, max_files=10, threads=3)
    worker = WorkerSettings(snapshot_store="local", local_snapshot_dir=tmp_path, snapshots=snaps)
    with open_store(Settings(worker=worker)) as store:
        assert isinstance(store.objects, LocalObjects)
        assert (store.keep, store.gc_grace_s, store.limits.max_files) == (7, 120, 10)
    minio_store = open_store(Settings(worker=worker.model_copy(update={"snapshot_store": "minio"})))
    assert type(minio_store.objects).__name__ == "MinioObjects"  # lazily: no connection yet
    minio_store.close()
    with pytest.raises(InvalidInput, match="SNAPSHOT_STORE"):
        open_store(Settings(worker=worker.model_copy(update={"snapshot_store": "s3"})))


def test_carrying_follows_the_settings_within_its_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDGRID_WORKER__SNAPSHOTS__CARRY_BYTES", "0")  # a rollout: never
    snaps = Settings().worker.snapshots
    assert snaps.carry_bytes == 0
    worker = WorkerSettings(snapshot_store="local", local_snapshot_dir=tmp_path, snapshots=snaps)
    with open_store(Settings(worker=worker)) as store:
        assert store.carry_bytes == 0
    assert SnapshotSettings().carry_bytes == 64 << 10
    with pytest.raises(ValidationError, match="carry_bytes"):
        SnapshotSettings(carry_bytes=(1 << 20) + 1)


def test_snapshot_settings_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDGRID_WORKER__SNAPSHOTS__KEEP", "9")
    monkeypatch.setenv("SANDGRID_WORKER__SNAPSHOTS__MAX_BYTES", "1000")
    snaps = Settings().worker.snapshots
    assert (snaps.keep, snaps.max_bytes) == (9, 1000)
