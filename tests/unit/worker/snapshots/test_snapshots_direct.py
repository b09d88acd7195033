"""A snapshot takes changed files read from the host (``read_direct``, runc) instead of
a ``pack``, and only bytes that hash to what the scan said (issue 22.2)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sandgrid.models import Quotas
from sandgrid.wire.objects import LocalObjects
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import new_sandbox, tree, write
from tests.unit.worker.agent.test_scan import StubRuntime
from worker.agent import limits
from worker.sandboxes import files as files_mod
from worker.sandboxes.files import SNAPSHOT_ROOTS
from worker.sandboxes.handle import Sandbox
from worker.sandboxes.manager import SandboxManager
from worker.snapshots import SnapshotStore, restore_sandbox, snapshot_sandbox

TENANT = "acme"


class DirectBackend(HostDirBackend):
    """The host directory's files as ``read_direct`` gives them (or ``forged`` bytes),
    with every ``pack`` noted."""

    def __init__(self, forged: Mapping[str, bytes] | None = None) -> None:
        super().__init__()
        self.forged = dict(forged or {})
        self.packed: list[list[str]] = []
        self.asked: list[list[tuple[str, int]]] = []

    def read_direct(self, sbx: Path, files: Sequence[tuple[str, int]]) -> dict[str, bytes]:
        self.asked.append(list(files))
        return {p: self.forged.get(p) or (sbx / p.lstrip("/")).read_bytes() for p, _ in files}

    def pack(self, sbx: Path, paths: list[str]) -> bytes:
        self.packed.append(list(paths))
        return super().pack(sbx, paths)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SnapshotStore(LocalObjects(tmp_path / "store"), keep=3, small_file_bytes=1024)
    yield s
    s.close()


def restored(tmp_path: Path, store: SnapshotStore) -> dict[str, Any]:
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", None)
    return tree(dst)


def test_a_snapshot_takes_the_hosts_bytes_and_asks_no_pack(
    tmp_path: Path, store: SnapshotStore
) -> None:
    sbx = new_sandbox(tmp_path, "sbx")
    write(sbx, "workspace/big.bin", os.urandom(300_000))
    write(sbx, "workspace/d/small.txt", b"small")
    backend = DirectBackend()
    assert snapshot_sandbox(backend, sbx, store, TENANT, "s1", None) is not None
    assert backend.packed == []
    assert sorted(p for p, _ in backend.asked[0]) == [
        "/workspace/big.bin",
        "/workspace/d/small.txt",
    ]
    assert restored(tmp_path, store) == tree(sbx)


def test_host_bytes_that_do_not_hash_to_the_scan_are_never_stored_the_retry_packs(
    tmp_path: Path, store: SnapshotStore
) -> None:
    sbx = new_sandbox(tmp_path, "sbx")
    data = os.urandom(300_000)
    write(sbx, "workspace/big.bin", data)
    write(sbx, "workspace/other.bin", os.urandom(2000))
    forged = bytes(b ^ 1 for b in data)  # the same size, other bytes
    backend = DirectBackend({"/workspace/big.bin": forged})
    ref = snapshot_sandbox(backend, sbx, store, TENANT, "s1", None)
    assert ref is not None and ref.stats["attempts"] == 2  # the first refused them
    assert len(backend.asked) == 1  # the second attempt asked the sandbox for everything
    assert sorted(p for batch in backend.packed for p in batch) == [
        "/workspace/big.bin",
        "/workspace/other.bin",
    ]
    assert restored(tmp_path, store) == tree(sbx)


class PidRuntime(StubRuntime):
    def __init__(self, pid: int | None) -> None:
        self.pid, self.asked = pid, 0

    def host_pid(self, sandbox_id: str) -> int | None:
        self.asked += 1
        return self.pid


def handle() -> Sandbox:
    return Sandbox("c" * 64, "sbx", "python", "stub", Quotas(), {})


def test_the_agent_files_read_through_the_runtimes_pid_asked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_read(pid: int, cid: str, files: Any, roots: Any) -> dict[str, bytes]:
        calls.append((pid, cid, list(files), tuple(roots)))
        return {"/workspace/a": b"a"}

    monkeypatch.setattr(files_mod, "read_beneath", fake_read)
    runtime = PidRuntime(4242)
    manager, sbx = SandboxManager(runtime), handle()
    assert manager.files.read_direct(sbx, [("/workspace/a", 1)]) == {"/workspace/a": b"a"}
    assert manager.files.read_direct(sbx, [("/workspace/b", 2)]) == {"/workspace/a": b"a"}
    assert runtime.asked == 1
    assert calls[0] == (4242, sbx.id, [("/workspace/a", 1)], SNAPSHOT_ROOTS)
    assert SNAPSHOT_ROOTS == limits.ROOTS


def test_a_runtime_without_a_host_pid_reads_nothing_and_is_asked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(files_mod, "read_beneath", lambda *a: pytest.fail("read"))
    runtime = PidRuntime(None)
    manager, sbx = SandboxManager(runtime), handle()
    assert manager.files.read_direct(sbx, [("/workspace/a", 1)]) == {}
    assert manager.files.read_direct(sbx, [("/workspace/a", 1)]) == {}
    assert runtime.asked == 1 and sbx.host_pid == 0


class FailingRuntime(StubRuntime):
    def host_pid(self, sandbox_id: str) -> int | None:
        raise RuntimeError("the engine did not answer")


def test_a_runtime_that_fails_to_name_the_pid_leaves_the_agent_to_pack() -> None:
    manager, sbx = SandboxManager(FailingRuntime()), handle()
    assert manager.files.read_direct(sbx, [("/workspace/a", 1)]) == {}
    assert sbx.host_pid == 0
