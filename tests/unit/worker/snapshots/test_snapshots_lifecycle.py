"""Retention, garbage collection and fork of the snapshot store (local backend)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from sandgrid.errors import InvalidInput, NotFound, SnapshotError
from sandgrid.wire.objects import LocalObjects, StoreConflict
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import new_sandbox
from tests.support.snapshot_stores import local_store
from worker.snapshots import SnapshotRef, SnapshotStore, catalog, restore_sandbox
from worker.snapshots import snapshot_sandbox as _snapshot_sandbox
from worker.snapshots.transfer import plan, put_blob

TENANT = "acme"
GRACE = 600.0
LATER = 3 * GRACE  # seconds after which every unreferenced blob is old enough


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SnapshotStore]:
    # These tests read and edit the stored form: every snapshot is stored before
    # its pointer (test_snapshots_carried.py covers the pointers that carry one).
    s = local_store(
        tmp_path / "store",
        keep=2,
        gc_grace_s=GRACE,
        threads=2,
        small_file_bytes=1024,
        carry_bytes=0,
    )
    yield s
    s.close()


@pytest.fixture
def sbx(tmp_path: Path) -> Path:
    return new_sandbox(tmp_path, "sbx")


def put(sbx: Path, name: str, data: bytes) -> None:
    (sbx / "workspace" / name).write_bytes(data)


def take(sbx: Path, store: SnapshotStore, session: str = "s1", tenant: str = TENANT) -> SnapshotRef:
    ref = _snapshot_sandbox(HostDirBackend(), sbx, store, tenant, session, None)
    assert ref is not None
    return ref


def blobs(store: SnapshotStore, tenant: str = TENANT) -> set[str]:
    d = store.objects.root / "t" / tenant / "blobs"
    return {p.name for p in d.iterdir()} if d.exists() else set()


def manifests(store: SnapshotStore, session: str = "s1") -> set[str]:
    d = store.objects.root / "t" / TENANT / "s" / session / "snap"
    return {p.stem for p in d.iterdir()}


def age(store: SnapshotStore, seconds: float) -> None:
    """Make every object of the store look ``seconds`` older."""
    for p in store.objects.root.rglob("*"):
        if p.is_file():
            st = p.stat()
            os.utime(p, (st.st_atime - seconds, st.st_mtime - seconds))


# ---- retention ----------------------------------------------------------------------


def test_retention_keeps_the_last_k_snapshots(sbx: Path, store: SnapshotStore) -> None:
    refs = []
    for i in range(5):
        put(sbx, "f", b"version %d" % i)
        refs.append(take(sbx, store))
    kept = store.snapshots(TENANT, "s1")
    assert [r.name for r in kept] == [r.name for r in refs[-2:]]
    # the last two are differences from the first, which stays while they need it
    assert {store.load(TENANT, "s1", r).base for r in kept} == {refs[0].name}
    store.settle()
    assert manifests(store) == {r.name for r in [refs[0], *refs[-2:]]}
    assert store.latest(TENANT, "s1") == refs[-1]
    with pytest.raises(NotFound):
        store.load(TENANT, "s1", refs[1].name)


def test_retention_drops_a_base_no_kept_snapshot_needs(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "f", b"first")
    first = take(sbx, store)
    for i in range(80):  # a difference larger than MIN_DELTA entries: stored full
        put(sbx, f"g{i:03d}", b"x")
    full = take(sbx, store)
    assert store.load(TENANT, "s1", full).base is None
    put(sbx, "f", b"second")
    last = take(sbx, store)
    assert store.load(TENANT, "s1", last).base == full.name
    store.settle()
    assert manifests(store) == {full.name, last.name}
    with pytest.raises(NotFound):
        store.load(TENANT, "s1", first.name)


def test_dropped_manifests_are_deleted_a_batch_at_a_time(
    sbx: Path, store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What retention drops waits (a stray no pointer names) until ``DELETE_BATCH``
    manifests are due, then goes in one ``delete_many``; ``settle`` takes the rest."""
    monkeypatch.setattr(catalog, "DELETE_BATCH", 3)
    calls: list[list[str]] = []
    delete_many = store.objects.delete_many

    def counted(keys: Sequence[str]) -> None:
        calls.append([k.rsplit("/", 1)[-1].removesuffix(".json") for k in keys])
        delete_many(keys)

    monkeypatch.setattr(store.objects, "delete_many", counted)
    refs = []
    for i in range(5):  # keep=2 and the base, refs[0]: refs[1] and refs[2] dropped
        put(sbx, "f", b"version %d" % i)
        refs.append(take(sbx, store))
    assert calls == [] and {refs[1].name, refs[2].name} <= manifests(store)
    put(sbx, "f", b"version 5")
    refs.append(take(sbx, store))  # refs[3] dropped: three due, one request
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [sorted(c) for c in calls] == [sorted(r.name for r in refs[1:4])]
    put(sbx, "f", b"version 6")
    refs.append(take(sbx, store))  # refs[4] dropped, alone: left until settle
    store.settle()
    assert calls[1:] == [[refs[4].name]]
    assert manifests(store) == {refs[0].name, refs[5].name, refs[6].name}


def test_close_deletes_the_manifests_retention_dropped(sbx: Path, store: SnapshotStore) -> None:
    refs = []
    for i in range(4):
        put(sbx, "f", b"version %d" % i)
        refs.append(take(sbx, store))
    store.close()
    assert manifests(store) == {refs[0].name, refs[2].name, refs[3].name}


# ---- garbage collection -------------------------------------------------------------


def test_gc_collects_only_old_unreferenced_blobs(
    tmp_path: Path, sbx: Path, store: SnapshotStore
) -> None:
    for i in range(4):
        put(sbx, "big", os.urandom(4096) + bytes([i]))
        take(sbx, store)
    assert len(blobs(store)) == 4
    # retained: the last two snapshots and the full manifest they differ from
    report = store.gc(TENANT)
    assert report.blobs_deleted == 0 and report.blobs_young == 1  # too young to go
    report = store.gc(TENANT, now=time.time() + LATER)
    assert report.blobs_deleted == 1 and report.blobs_referenced == 3
    assert len(blobs(store)) == 3
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", None)
    assert (dst / "workspace/big").read_bytes() == (sbx / "workspace/big").read_bytes()


def test_gc_keeps_the_blobs_of_a_snapshot_in_flight(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", os.urandom(5000))
    take(sbx, store)
    age(store, LATER)
    put(sbx, "b", os.urandom(5000))
    scan = HostDirBackend().scan(sbx, ["/workspace", "/home/sandbox"])
    draft = store.prepare(TENANT, "s1", scan, None)
    assert draft is not None
    contents = {e.sha256 or "": (sbx / e.path[1:]).read_bytes() for e in draft.need.values()}
    for blob, group in plan(store, draft):  # blobs stored, manifest not yet written
        put_blob(store, TENANT, blob, group, contents)
    report = store.gc(TENANT)
    assert report.blobs_deleted == 0
    ref = store.commit(draft, contents)
    assert store.load(TENANT, "s1", ref).hash == ref.hash


def test_gc_removes_old_stray_manifests_but_not_young_ones(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", b"a")
    ref = take(sbx, store)
    snap_dir = store.objects.root / "t" / TENANT / "s" / "s1" / "snap"
    stray = snap_dir / "000000000009-00000000dead.json"  # as if a commit died before its pointer
    stray.write_bytes((snap_dir / f"{ref.name}.json").read_bytes())
    assert store.gc(TENANT).manifests_deleted == 0  # young: maybe a commit in flight
    age(store, LATER)
    assert store.gc(TENANT).manifests_deleted == 1
    assert not stray.exists()


def test_gc_never_touches_another_tenant(tmp_path: Path, sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", os.urandom(3000))
    take(sbx, store)
    store.delete_session(TENANT, "s1")
    other = new_sandbox(tmp_path, "other")
    put(other, "a", os.urandom(3000))
    take(other, store, tenant="globex")
    age(store, LATER)
    assert store.gc("globex").blobs_deleted == 0
    assert len(blobs(store)) == 1
    assert store.gc(TENANT).blobs_deleted == 1
    assert blobs(store) == set() and len(blobs(store, "globex")) == 1


def test_gc_stops_on_an_unreadable_retained_manifest(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", b"a")
    ref = take(sbx, store)
    (store.objects.root / "t" / TENANT / "s" / "s1" / "snap" / f"{ref.name}.json").write_bytes(
        b"Zjunk"
    )
    age(store, LATER)
    with pytest.raises(SnapshotError, match="unreadable"):
        store.gc(TENANT)
    assert len(blobs(store)) == 1


def test_gc_forgets_deleted_blobs_in_this_process(sbx: Path, store: SnapshotStore) -> None:
    data = os.urandom(5000)
    put(sbx, "a", data)
    take(sbx, store)
    store.delete_session(TENANT, "s1")
    age(store, LATER)
    store.gc(TENANT)
    put(sbx, "a", data)  # same content again: must be uploaded again, not "known"
    ref = take(sbx, store, session="s2")
    assert ref.stats["uploaded_blobs"] == 1
    assert len(blobs(store)) == 1


def test_stale_memory_is_not_trusted(sbx: Path, store: SnapshotStore) -> None:
    """A blob remembered (or found by a HEAD) but older than half the grace is uploaded
    again: gc may be about to delete it."""
    data = os.urandom(5000)
    put(sbx, "a", data)
    take(sbx, store)
    age(store, GRACE)
    for key, known in list(store.known._items.items()):
        store.known._items[key] = known._replace(stamp=known.stamp - GRACE)
    put(sbx, "b", data)
    ref = take(sbx, store, session="s2")
    assert ref.stats["uploaded_blobs"] == 1


# ---- fork ---------------------------------------------------------------------------


def test_fork_shares_blobs_and_then_diverges(
    tmp_path: Path, sbx: Path, store: SnapshotStore
) -> None:
    put(sbx, "a", os.urandom(4000))
    put(sbx, "b", b"small")
    src = take(sbx, store)
    before = blobs(store)
    ref = store.fork(TENANT, "s1", "s2")
    assert blobs(store) == before
    assert ref.session_id == "s2" and ref.seq == 1 and ref.hash == src.hash
    assert ref.manifest is not None and ref.manifest.parent == f"s1/{src.name}"
    dst = new_sandbox(tmp_path, "dst")
    manifest = restore_sandbox(HostDirBackend(), dst, store, TENANT, "s2", ref)
    put(dst, "b", b"changed in the fork")
    assert _snapshot_sandbox(HostDirBackend(), dst, store, TENANT, "s2", manifest) is not None
    assert store.load(TENANT, "s1").hash == src.hash
    assert store.load(TENANT, "s2").hash != src.hash


def test_fork_refusals(sbx: Path, store: SnapshotStore) -> None:
    with pytest.raises(NotFound):
        store.fork(TENANT, "s1", "s2")
    put(sbx, "a", b"a")
    take(sbx, store)
    store.fork(TENANT, "s1", "s2")
    with pytest.raises(InvalidInput, match="already has snapshots"):
        store.fork(TENANT, "s1", "s2")
    with pytest.raises(InvalidInput):
        store.fork(TENANT, "s1", "s1")
    with pytest.raises(InvalidInput):
        store.fork(TENANT, "s1", "../s3")


def test_fork_survives_gc_of_the_source(tmp_path: Path, sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", os.urandom(4000))
    take(sbx, store)
    store.fork(TENANT, "s1", "s2")
    store.delete_session(TENANT, "s1")
    age(store, LATER)
    assert store.gc(TENANT).blobs_deleted == 0
    restore_sandbox(HostDirBackend(), new_sandbox(tmp_path, "dst"), store, TENANT, "s2", None)


def test_delete_session_forgets_its_snapshots(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", b"a")
    take(sbx, store)
    put(sbx, "a", b"b")
    take(sbx, store)
    assert store.delete_session(TENANT, "s1") == 2
    assert store.snapshots(TENANT, "s1") == []
    with pytest.raises(NotFound):
        store.load(TENANT, "s1")


# ---- the pointer's conditional write --------------------------------------------------


class LostReply(LocalObjects):
    """Objects whose first conditional write lands but answers as a conflict, as a
    retried PUT does when the first reply was lost on the way."""

    lost = False

    def put_if(self, key: str, data: bytes, tag: str | None) -> None:
        super().put_if(key, data, tag)
        if not self.lost:
            self.lost = True
            raise StoreConflict(key)


def test_a_pointer_write_that_landed_is_not_reported_as_a_conflict(
    tmp_path: Path, sbx: Path
) -> None:
    lost = LostReply(tmp_path / "lost")
    store = SnapshotStore(lost, keep=2, gc_grace_s=GRACE)
    put(sbx, "a", b"1")
    ref = take(sbx, store)
    assert lost.lost and store.latest(TENANT, "s1") == ref
    store.close()


def test_a_fork_never_lands_on_a_session_with_snapshots(
    sbx: Path, store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(sbx, "a", b"1")
    take(sbx, store, "src")
    real = store.read_pointer

    def racing(tenant: str, session: str) -> list[tuple[str, str]]:
        history = real(tenant, session)
        if session == "dst" and not history:  # dst gets a snapshot right after the check
            take(sbx, store, "dst")
        return history

    monkeypatch.setattr(store, "read_pointer", racing)
    with pytest.raises(SnapshotError, match="snapshotted elsewhere"):
        store.fork(TENANT, "src", "dst")
