"""Named checkpoints in the snapshot store: kept past retention and gc, restored, quota."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgrid.errors import Conflict, ErrorCode, InvalidInput, LimitExceeded, NotFound
from sandgrid.lifecycle import MAX_CHECKPOINTS
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import new_sandbox
from tests.support.snapshot_stores import local_store
from worker.snapshots import SnapshotRef, SnapshotStore, restore_sandbox
from worker.snapshots import checkpoints as ck
from worker.snapshots import snapshot_sandbox as _snapshot_sandbox

TENANT = "acme"
SID = "s-" + "a" * 20
GRACE = 600.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SnapshotStore]:
    s = local_store(tmp_path / "store", keep=2, gc_grace_s=GRACE, threads=2, small_file_bytes=64)
    yield s
    s.close()


@pytest.fixture
def sbx(tmp_path: Path) -> Path:
    return new_sandbox(tmp_path, "sbx")


def take(sbx: Path, store: SnapshotStore, data: bytes) -> SnapshotRef:
    (sbx / "workspace" / "f").write_bytes(data)
    ref = _snapshot_sandbox(HostDirBackend(), sbx, store, TENANT, SID, None)
    assert ref is not None
    return ref


def test_a_checkpoint_outlives_retention_and_gc_and_restores(
    sbx: Path, store: SnapshotStore, tmp_path: Path
) -> None:
    take(sbx, store, b"v1 " * 100)
    ck.create(store, TENANT, SID, "before")
    for i in range(4):  # retention keeps 2: v1 falls out of the session's history
        take(sbx, store, b"v%d " % (i + 2) * 100)
    store.gc(TENANT, now=time.time() + 10 * GRACE)  # every unreferenced blob is old
    ref = ck.restore(store, TENANT, SID, "before")
    assert store.latest(TENANT, SID) == ref
    fresh = new_sandbox(tmp_path, "fresh")
    restore_sandbox(HostDirBackend(), fresh, store, TENANT, SID, ref.name)
    assert (fresh / "workspace" / "f").read_bytes() == b"v1 " * 100
    assert list(ck.checkpoints(store, TENANT, SID)) == ["before"]


def test_a_fork_of_a_checkpoint_starts_from_it(sbx: Path, store: SnapshotStore) -> None:
    take(sbx, store, b"one")
    ck.create(store, TENANT, SID, "c1")
    take(sbx, store, b"two")
    other = "s-" + "b" * 20
    ref = store.fork(TENANT, ck.checkpoint_id(SID, "c1"), other)
    assert (
        store.load(TENANT, other, ref).entries
        == store.load(TENANT, ck.checkpoint_id(SID, "c1")).entries
    )


def test_names_are_checked_unique_and_limited(sbx: Path, store: SnapshotStore) -> None:
    with pytest.raises(Conflict) as none:
        ck.create(store, TENANT, SID, "early")
    assert none.value.code == ErrorCode.NO_SNAPSHOT
    take(sbx, store, b"x")
    with pytest.raises(InvalidInput) as bad:
        ck.create(store, TENANT, SID, "../up")
    assert bad.value.context["field"] == "name"
    ck.create(store, TENANT, SID, "c")
    with pytest.raises(Conflict) as dup:
        ck.create(store, TENANT, SID, "c")
    assert dup.value.code == ErrorCode.CHECKPOINT_EXISTS
    for i in range(MAX_CHECKPOINTS - 1):
        ck.create(store, TENANT, SID, f"n{i}")
    with pytest.raises(LimitExceeded) as full:
        ck.create(store, TENANT, SID, "one-too-many")
    assert full.value.context["max"] == MAX_CHECKPOINTS
    ck.delete(store, TENANT, SID, "c")
    ck.create(store, TENANT, SID, "one-too-many")  # deleting one makes room


def test_delete_and_drop_all(sbx: Path, store: SnapshotStore) -> None:
    take(sbx, store, b"x")
    ck.create(store, TENANT, SID, "a")
    ck.create(store, TENANT, SID, "b")
    ck.delete(store, TENANT, SID, "a")
    with pytest.raises(NotFound):
        ck.delete(store, TENANT, SID, "a")
    with pytest.raises(NotFound):
        ck.restore(store, TENANT, SID, "a")
    assert ck.drop_all(store, TENANT, SID) == 1
    assert ck.checkpoints(store, TENANT, SID) == {}
