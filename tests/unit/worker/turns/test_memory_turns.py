"""Pause with memory and the resume after it, around fakes (issue 24.2, 24.4)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import CapacityError, Conflict, ErrorCode, InvalidInput, SandboxError
from sandgrid.models import Quotas, SessionInfo
from sandgrid.wire.settings import get_settings
from tests.support.snapshot_stores import local_store
from worker.runtimes.docker_runsc import DockerRunsc
from worker.sandboxes import Sandbox
from worker.sessions.table import LocalSession
from worker.turns import memory


class _Ledger:
    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []

    def update(self, session_id: str, **fields: Any) -> None:
        self.updates.append(fields)


class _Engine:
    def __init__(self, *, can: bool = True, fail: bool = False) -> None:
        self.can_checkpoint, self.fail = can, fail

    def checkpoint(self, sandbox_id: str, image_dir: Path, *, leave_running: bool = False) -> None:
        self.left_running = leave_running
        if self.fail:
            raise SandboxError("runsc checkpoint failed: cannot save a host socket")
        (image_dir / "checkpoint.img").write_bytes(b"state" * 100)


class _Egress:
    def __init__(self, open_now: int) -> None:
        self.open_now = open_now

    def open_connections(self, name: str) -> int:
        return self.open_now


class _Backend:
    def __init__(self, engine: _Engine, egress: _Egress | None = None) -> None:
        self.engine, self.egress = engine, egress
        self.runtime = "runsc" if engine.can_checkpoint else "runc"
        self.made: list[dict[str, Any]] = []

    def create(self, sandbox_type: str, quotas: Quotas, **kw: Any) -> Sandbox:
        kw["before_start"]()  # the container exists; it starts once its image is whole
        assert (kw["restore_image"] / "checkpoint.img").exists()
        self.made.append(kw)
        return Sandbox("new", "sandgrid-x", sandbox_type, self.runtime, quotas, {})


@pytest.fixture(autouse=True)
def _scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SANDGRID_WORKER__MEMORY__IMAGE_DIR", str(tmp_path / "scratch"))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def _local() -> LocalSession:
    sbx = Sandbox("old", "sandgrid-x", "python-gvisor", "runsc", Quotas(), {})
    return LocalSession(session_id="s-1", tenant="acme", sandbox_type="python-gvisor", sandbox=sbx)


def _info(image: str | None) -> SessionInfo:
    now = dt.datetime.now(dt.UTC)
    return SessionInfo(
        id="s-1", tenant="acme", type="python-gvisor", quotas=Quotas(), created_at=now,
        last_used=now, memory_image=image,
    )  # fmt: skip


def test_runc_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput, match="runs on runc") as err:
        memory.check_savable(_Backend(_Engine(can=False)), _local().sandbox)  # type: ignore[arg-type]
    assert err.value.context["field"] == "memory"


def test_an_open_egress_connection_is_refused_naming_it() -> None:
    backend = _Backend(_Engine(), _Egress(2))
    with pytest.raises(Conflict, match="2 egress connection") as err:
        memory.check_savable(backend, _local().sandbox)  # type: ignore[arg-type]
    assert err.value.code == ErrorCode.MEMORY_UNSAVABLE
    assert err.value.context["cause"] == "egress_connection"


def test_pause_then_arrive_restores_once(tmp_path: Path) -> None:
    store, ledger, backend = local_store(tmp_path / "objects"), _Ledger(), _Backend(_Engine())
    done = memory.pause(ledger, store, backend, _local())  # type: ignore[arg-type]
    assert done.memory and done.memory_bytes and done.released
    image = ledger.updates[-1]["memory_image"]
    local = memory.arrive(ledger, store, backend, _info(image))  # type: ignore[arg-type]
    assert local is not None and local.sandbox.lineage == ("old",)
    # taken before the restore
    assert ledger.updates[-2] == {"memory_image": None, "memory_staged_on": None}
    assert ledger.updates[-1] == {"memory_restored": True, "memory_reason": None}
    again = memory.arrive(ledger, store, backend, _info(image))  # type: ignore[arg-type]
    assert again is None and "not in the store" in ledger.updates[-1]["memory_reason"]


def test_a_failed_checkpoint_answers_why_and_saves_no_image(tmp_path: Path) -> None:
    store, ledger = local_store(tmp_path / "objects"), _Ledger()
    done = memory.pause(ledger, store, _Backend(_Engine(fail=True)), _local())  # type: ignore[arg-type]
    assert not done.memory and "host socket" in (done.memory_reason or "")
    assert ledger.updates == []


def test_the_scratch_of_a_dead_worker_is_collected_and_a_live_ones_kept(tmp_path: Path) -> None:
    import os
    import subprocess

    dead_pid = subprocess.Popen(["true"])  # its pid is no process once it was waited for
    dead_pid.wait()
    root = tmp_path / "scratch"
    root.mkdir()
    dead = root / f"img-{dead_pid.pid}-abc"
    live = root / f"img-{os.getpid()}-def"
    for path in (dead, live):
        path.mkdir()
        (path / "pages.img").write_bytes(b"p" * 100)
    assert memory.collect_scratch() == 1
    assert not dead.exists() and live.exists()
    with memory.scratch() as path:
        assert path.name.startswith(f"img-{os.getpid()}-")


class _Creates:
    """A backend's ``create`` that refuses the first restore with ``first`` (or not);
    its engine is runsc's, which reads the refusal (no Docker client is used)."""

    def __init__(self, first: str | None) -> None:
        self.first = first
        self.calls: list[dict[str, Any]] = []
        self.engine = DockerRunsc(client=object())  # type: ignore[arg-type]

    def create(self, *args: Any, **kw: Any) -> Sandbox:
        self.calls.append(kw)
        if kw.get("before_start") is not None:
            kw["before_start"]()
        if self.first is not None and len(self.calls) == 1:
            raise CapacityError(f"sandbox did not come up (runsc): {self.first}")
        return Sandbox("new", "sandgrid-y", "python-gvisor", "runsc", Quotas(), {})


def _restore_with(backend: _Creates, tmp_path: Path) -> Sandbox:
    gate = memory._Gate(lambda: None)
    try:
        return memory._create_restoring(backend, _info("sha"), tmp_path, gate)  # type: ignore[arg-type]
    finally:
        gate.release()


def test_an_image_of_the_engines_network_layout_is_restored_in_it(tmp_path: Path) -> None:
    refused = 'validate restore spec: "Mounts" does not match across checkpoint restore for c'
    backend = _Creates(refused)
    assert _restore_with(backend, tmp_path).id == "new"
    first, second = backend.calls
    assert "engine_network" not in first and second["engine_network"] is True
    assert second["restore_image"] == tmp_path and "before_start" not in second


def test_any_other_restore_failure_is_not_tried_again(tmp_path: Path) -> None:
    backend = _Creates("checkpoint image is corrupt")
    with pytest.raises(CapacityError):
        _restore_with(backend, tmp_path)
    assert len(backend.calls) == 1
