"""Pointers that carry small snapshots: the commit of one store round trip.

A small snapshot's manifest and new blobs travel inside the conditional write
of the session's pointer, after the small ones before it (a chain), and are
stored on their own after it once the chain passes its budget (the fold-out).
Most tests here fold out every chain at once (``fold_bytes=0``): one carried
snapshot at a time; the chain's own tests are at the end.
These tests hold the store's promises across that: what a reported turn saved
restores exactly on any node, before the fold-out, after it, and after a crash
between the two; verification on restore; garbage collection; old pointers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, SnapshotError
from sandgrid.wire.objects import LocalObjects, keys
from scheduler.registry.records import SessionRecords
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import new_sandbox, write
from worker.snapshots import SnapshotRef, SnapshotStore, restore_sandbox, snapshot_sandbox
from worker.snapshots import checkpoints as ck
from worker.snapshots import pointer as pointer_mod
from worker.snapshots.format.blobs import decode, encode

TENANT = "acme"
GRACE = 600.0
LATER = 3 * GRACE


class WatchedObjects(LocalObjects):
    """Local objects that note which thread wrote what."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writes: list[tuple[str, str]] = []  # (thread name, key)

    def put(self, key: str, data: bytes) -> None:
        self.writes.append((threading.current_thread().name, key))
        super().put(key, data)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        self.writes.append((threading.current_thread().name, key))
        return super().put_if(key, data, tag)

    def put_addressed(self, key: str, data: bytes) -> None:
        self.writes.append((threading.current_thread().name, key))
        super().put_addressed(key, data)

    def delete_many(self, keys_: list[str]) -> None:
        if keys_:
            self.writes.append((threading.current_thread().name, f"delete {len(keys_)}"))
        super().delete_many(keys_)


def store_on(root: Path, **kw: Any) -> SnapshotStore:
    kw.setdefault("fold_bytes", 0)
    return SnapshotStore(
        WatchedObjects(root), keep=3, gc_grace_s=GRACE, threads=2, small_file_bytes=1024, **kw
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[SnapshotStore]:
    s = store_on(root)
    yield s
    s.close()


@pytest.fixture
def sbx(tmp_path: Path) -> Path:
    return new_sandbox(tmp_path, "sbx")


def take(
    sbx: Path, store: SnapshotStore, previous: SnapshotRef | None = None, session: str = "s1"
) -> SnapshotRef:
    ref = snapshot_sandbox(
        HostDirBackend(), sbx, store, TENANT, session, previous.manifest if previous else None
    )
    assert ref is not None
    return ref


def crashing(store: SnapshotStore) -> SnapshotStore:
    """The store of a node that dies right after each pointer write: no fold-out."""
    store.fold_out_later = lambda *a, **k: None  # type: ignore[method-assign]
    return store


def pointer_doc(root: Path, session: str = "s1") -> dict[str, Any]:
    stored = (root / keys.pointer_key(TENANT, session)).read_bytes()
    doc: dict[str, Any] = json.loads(bytes(decode(stored)))
    return doc


def put_pointer_doc(root: Path, doc: dict[str, Any]) -> None:
    (root / keys.pointer_key(TENANT, "s1")).write_bytes(encode(json.dumps(doc).encode()))


def carried_names(root: Path, session: str = "s1") -> list[str]:
    return [n for n, _ in pointer_doc(root, session)["carried"]["manifests"]]


def stored(root: Path, session: str, name: str) -> bool:
    return (root / keys.manifest_key(TENANT, session, name)).exists()


def blob_files(root: Path) -> set[str]:
    d = root / "t" / TENANT / "blobs"
    return {p.name for p in d.iterdir()} if d.exists() else set()


def tree(sbx: Path) -> dict[str, bytes]:
    w = sbx / "workspace"
    return {str(p.relative_to(w)): p.read_bytes() for p in sorted(w.rglob("*")) if p.is_file()}


def restored(tmp_path: Path, root: Path, name: str, ref: str | None = None) -> dict[str, bytes]:
    """The workspace a fresh node (no memory of anything) restores."""
    with store_on(root) as fresh:
        dst = new_sandbox(tmp_path, name)
        restore_sandbox(HostDirBackend(), dst, fresh, TENANT, "s1", ref)
        return tree(dst)


def age(root: Path, seconds: float) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            os.utime(p, (st.st_atime - seconds, st.st_mtime - seconds))


# ---- the write ------------------------------------------------------------------------


def test_a_small_snapshot_is_one_write_on_the_callers_path(
    tmp_path: Path, sbx: Path, store: SnapshotStore, root: Path
) -> None:
    write(sbx, "workspace/a.txt", b"hello")
    objects: Any = store.objects
    ref = take(sbx, store)
    mine = [k for who, k in objects.writes if not who.startswith("sg-snapshots")]
    assert mine == [keys.pointer_key(TENANT, "s1")]
    assert ref.stats["carried"] == 1.0
    doc = pointer_doc(root)
    assert doc["v"] == pointer_mod.CHAIN_VERSION
    assert carried_names(root) == [ref.name] and doc["history"][-1][0] == ref.name


def test_a_large_snapshot_stores_its_blobs_first_and_its_pointer_carries_the_manifest(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    data = os.urandom(8192)
    with crashing(store_on(root, carry_bytes=4096)) as store:
        write(sbx, "workspace/big.bin", data)
        ref = take(sbx, store)
    assert ref.stats["carried"] == 1.0 and ref.stats["carried_blobs"] == 0
    assert hashlib.sha256(data).hexdigest() in blob_files(root)  # stored before the pointer
    doc = pointer_doc(root)
    assert doc["v"] == pointer_mod.CHAIN_VERSION
    assert carried_names(root) == [ref.name] and doc["carried"]["blobs"] == []
    assert not stored(root, "s1", ref.name)  # the node died before the fold-out
    assert restored(tmp_path, root, "fresh") == tree(sbx)  # the pointer's manifest is enough
    with store_on(root, carry_bytes=4096) as store:
        write(sbx, "workspace/big.bin", os.urandom(8192))
        take(sbx, store, ref)  # carried on in the next chain, folded out after its write
        store.settle()
    assert stored(root, "s1", ref.name)


def test_a_large_snapshot_with_a_manifest_too_large_to_carry_is_stored_first(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with store_on(root, carry_bytes=64) as store:
        write(sbx, "workspace/big.bin", os.urandom(8192))
        ref = take(sbx, store)
        assert ref.stats["carried"] == 0.0
        assert stored(root, "s1", ref.name)
        assert pointer_doc(root)["v"] == pointer_mod.POINTER_VERSION


def test_the_carried_manifest_of_a_large_snapshot_is_folded_out_after_the_answer(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with store_on(root, carry_bytes=4096) as store:
        write(sbx, "workspace/big.bin", os.urandom(8192))
        ref = take(sbx, store)
        store.settle()
        assert stored(root, "s1", ref.name)
    (root / keys.pointer_key(TENANT, "s1")).unlink()  # the stored objects alone
    with store_on(root) as fresh:
        assert fresh.read_manifest(TENANT, "s1", ref.name).hash == ref.hash


# ---- read and restore -----------------------------------------------------------------


def test_a_carried_snapshot_restores_exactly_on_another_node_before_its_fold_out(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with crashing(store_on(root)) as store:
        write(sbx, "workspace/a.txt", b"one")
        write(sbx, "workspace/b.txt", b"two")
        first = take(sbx, store)
        write(sbx, "workspace/a.txt", b"one, changed")
        second = take(sbx, store, first)
    assert carried_names(root) == [first.name, second.name]  # a chain: neither is stored
    assert not stored(root, "s1", first.name) and not stored(root, "s1", second.name)
    assert restored(tmp_path, root, "latest") == tree(sbx)
    assert restored(tmp_path, root, "by-name", second.name) == tree(sbx)  # the registry's way
    assert restored(tmp_path, root, "older", first.name) == {"a.txt": b"one", "b.txt": b"two"}


def test_the_fold_out_stores_blobs_and_manifest_after_the_answer(
    tmp_path: Path, sbx: Path, store: SnapshotStore, root: Path
) -> None:
    write(sbx, "workspace/a.txt", b"hello")
    ref = take(sbx, store)
    store.settle()
    assert stored(root, "s1", ref.name)
    assert set(ref.manifest.blobs) <= blob_files(root)  # type: ignore[union-attr]
    (root / keys.pointer_key(TENANT, "s1")).unlink()  # the stored objects alone
    with store_on(root) as fresh:
        again = fresh.read_manifest(TENANT, "s1", ref.name)
        assert again.hash == ref.hash and not again.carried


def test_a_carried_blob_that_does_not_verify_is_refused(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with crashing(store_on(root)) as store:
        write(sbx, "workspace/a.txt", b"hello")
        take(sbx, store)
    doc = pointer_doc(root)
    blob, data = doc["carried"]["blobs"][0]
    forged = bytes(b ^ 1 for b in base64.b64decode(data))  # same size, other bytes
    doc["carried"]["blobs"][0] = [blob, base64.b64encode(forged).decode()]
    put_pointer_doc(root, doc)
    with pytest.raises(SnapshotError) as err:
        restored(tmp_path, root, "dst")
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT


def test_a_pointer_carrying_a_snapshot_its_history_does_not_name_is_corrupt(
    sbx: Path, root: Path
) -> None:
    with crashing(store_on(root)) as store:
        write(sbx, "workspace/a.txt", b"1")
        take(sbx, store)
        doc = pointer_doc(root)
        doc["carried"]["manifests"][0][0] = "000000000009-aaaaaaaaaaaa"
        put_pointer_doc(root, doc)
        with pytest.raises(SnapshotError) as err:
            store.load(TENANT, "s1")
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT


def test_an_old_pointer_is_read_and_followed(tmp_path: Path, sbx: Path, root: Path) -> None:
    with store_on(root, carry_bytes=0) as old:
        write(sbx, "workspace/a.txt", b"1")
        first = take(sbx, old)
    assert pointer_doc(root)["v"] == pointer_mod.POINTER_VERSION
    with store_on(root) as new:
        write(sbx, "workspace/a.txt", b"2")
        second = take(sbx, new)
        assert second.stats["carried"] == 1.0 and second.manifest is not None
        assert second.manifest.base == first.name  # a difference from the stored one
    assert restored(tmp_path, root, "dst") == tree(sbx)


def test_the_registry_reads_the_latest_name_of_a_carrying_pointer(
    sbx: Path, store: SnapshotStore, root: Path
) -> None:
    write(sbx, "workspace/a.txt", b"1")
    ref = take(sbx, store)
    assert SessionRecords(LocalObjects(root)).latest_snapshot(TENANT, "s1") == ref.name


# ---- a crash between the pointer and the fold-out -------------------------------------


def test_the_next_owner_carries_on_the_chain_a_dead_node_left(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with crashing(store_on(root)) as dead:
        write(sbx, "workspace/a.txt", b"one")
        first = take(sbx, dead)
    with crashing(store_on(root)) as heir:
        write(sbx, "workspace/b.txt", b"two")
        second = take(sbx, heir)  # compares with the stored latest, which is carried
    assert carried_names(root) == [first.name, second.name]  # nothing folded out
    assert not stored(root, "s1", first.name) and not blob_files(root)
    assert restored(tmp_path, root, "latest") == tree(sbx)
    assert restored(tmp_path, root, "older", first.name) == {"a.txt": b"one"}


def test_a_failed_fold_out_is_done_again_by_the_next_snapshot(
    sbx: Path, store: SnapshotStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store.fold_out
    calls: list[str] = []

    def failing_once(tenant: str, session_id: str, carried: Any) -> None:
        calls.append(carried.latest)
        if len(calls) == 1:
            raise OSError("the store went away")  # the background job dies
        real(tenant, session_id, carried)

    monkeypatch.setattr(store, "fold_out", failing_once)
    write(sbx, "workspace/a.txt", b"1")
    first = take(sbx, store)
    store.settle()
    assert not stored(root, "s1", first.name)
    write(sbx, "workspace/a.txt", b"2")
    take(sbx, store, first)
    assert stored(root, "s1", first.name) and calls[:2] == [first.name, first.name]


# ---- fork, checkpoints, gc -------------------------------------------------------------


def test_a_fork_of_a_carried_snapshot_stores_what_it_shares(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with crashing(store_on(root)) as store:
        write(sbx, "workspace/a.txt", b"shared")
        src = take(sbx, store)
        store.fork(TENANT, "s1", "s2")
        assert set(src.manifest.blobs) <= blob_files(root)  # type: ignore[union-attr]
    with store_on(root) as fresh:
        dst = new_sandbox(tmp_path, "fork")
        restore_sandbox(HostDirBackend(), dst, fresh, TENANT, "s2", None)
    assert tree(dst) == {"a.txt": b"shared"}


def test_a_checkpoint_of_a_carried_snapshot_restores_after_gc(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with crashing(store_on(root)) as store:
        write(sbx, "workspace/a.txt", b"kept")
        first = take(sbx, store)
        ck.create(store, TENANT, "s1", "before")
        write(sbx, "workspace/a.txt", b"later")
        take(sbx, store, first)
        store.gc(TENANT, now=time.time() + LATER)
        back = ck.restore(store, TENANT, "s1", "before")
    assert restored(tmp_path, root, "dst", back.name) == {"a.txt": b"kept"}


def test_gc_keeps_what_a_carried_snapshot_names(tmp_path: Path, sbx: Path, root: Path) -> None:
    with crashing(store_on(root)) as store:
        write(sbx, "workspace/a.txt", b"one")
        first = take(sbx, store)
        store.ensure_folded(TENANT, "s1", pointer_mod.read(store.objects, TENANT, "s1"))
        write(sbx, "workspace/b.txt", b"two")
        take(sbx, store, first)  # carried: reuses a.txt's stored pack
        store.gc(TENANT, now=time.time() + LATER)
    assert set(first.manifest.blobs) <= blob_files(root)  # type: ignore[union-attr]
    assert restored(tmp_path, root, "dst") == tree(sbx)


def test_gc_never_takes_a_folded_out_carried_manifest_for_a_stray(
    tmp_path: Path, sbx: Path, store: SnapshotStore, root: Path
) -> None:
    write(sbx, "workspace/a.txt", b"one")
    first = take(sbx, store)
    store.settle()
    age(root, LATER)  # an idle session: its folded-out manifest is old
    report = store.gc(TENANT)
    assert report.manifests_deleted == 0 and stored(root, "s1", first.name)
    write(sbx, "workspace/a.txt", b"two")
    take(sbx, store, first)  # names the first as stored, which it must still be
    assert restored(tmp_path, root, "older", first.name) == {"a.txt": b"one"}


# ---- the pointer this process wrote last --------------------------------------------


class ReadCounting(WatchedObjects):
    """Watched objects that count reads of pointers, and may misspell the tags they
    hand back from a conditional write."""

    def __init__(self, root: Path, misspell: bool = False) -> None:
        super().__init__(root)
        self.pointer_reads = 0
        self.misspell = misspell

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        self.pointer_reads += key.endswith("/latest")
        return super().get_tagged(key)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str | None:
        written = super().put_if(key, data, tag)
        return f"W/{written}" if self.misspell and written else written


def test_the_next_snapshot_builds_on_the_pointer_this_process_wrote(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    objects = ReadCounting(root)
    with SnapshotStore(objects, keep=3, gc_grace_s=GRACE, small_file_bytes=1024) as store:
        write(sbx, "workspace/a.txt", b"1")
        ref = take(sbx, store)
        reads = objects.pointer_reads
        for i in range(3):
            write(sbx, "workspace/a.txt", b"%d" % (i + 2))
            ref = take(sbx, store, ref)
        assert objects.pointer_reads == reads  # no read of the pointer on the way
    assert restored(tmp_path, root, "dst") == tree(sbx)


def test_a_pointer_moved_by_another_writer_is_a_conflict_then_read_afresh(
    sbx: Path, root: Path
) -> None:
    with store_on(root) as mine, store_on(root) as other:
        write(sbx, "workspace/a.txt", b"1")
        first = take(sbx, mine)
        write(sbx, "workspace/a.txt", b"theirs")
        take(sbx, other)  # another node, thought to own the session now
        write(sbx, "workspace/a.txt", b"mine")
        with pytest.raises(SnapshotError) as err:
            take(sbx, mine, first)
        assert err.value.code == ErrorCode.SNAPSHOT_FAILED
        assert mine.written_pointer(TENANT, "s1") is None  # forgotten: read next time


def test_a_remembered_tag_the_store_spells_otherwise_still_writes(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    objects = ReadCounting(root, misspell=True)
    with SnapshotStore(objects, keep=3, gc_grace_s=GRACE, small_file_bytes=1024) as store:
        write(sbx, "workspace/a.txt", b"1")
        ref = take(sbx, store)
        write(sbx, "workspace/a.txt", b"2")
        ref = take(sbx, store, ref)  # conflict on the tag alone: written on the tag read
        assert store.latest(TENANT, "s1") == ref
    assert restored(tmp_path, root, "dst") == tree(sbx)


# ---- the chain: small snapshots carried on, folded out past half the budget -------------


def chained(root: Path, **kw: Any) -> SnapshotStore:
    """A store whose pointers carry a chain (folded out past half of ``carry_bytes``)."""
    return store_on(root, fold_bytes=None, **kw)


def test_a_run_of_small_snapshots_is_one_write_each_and_carries_what_is_retained(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    contents: dict[str, dict[str, bytes]] = {}
    with chained(root) as store:
        objects: Any = store.objects
        ref = None
        for i in range(7):
            write(sbx, "workspace/log.txt", b"line\n" * (i + 1))
            before = len(objects.writes)
            ref = take(sbx, store, ref)
            store.settle()
            assert [k for _, k in objects.writes[before:]] == [keys.pointer_key(TENANT, "s1")]
            contents[ref.name] = tree(sbx)
        history = [n for n, _ in pointer_doc(root)["history"]]
    assert carried_names(root) == history and len(history) >= 3  # keep=3, and their bases
    assert not blob_files(root) and not any(stored(root, "s1", n) for n in contents)
    assert len(pointer_doc(root)["carried"]["blobs"]) <= len(history)  # dropped ones' blobs go
    for name in history:  # a fresh node restores each, the older ones from the chain too
        assert restored(tmp_path, root, f"r{name[:12]}", name) == contents[name]


def test_a_chain_past_half_the_budget_is_folded_out_and_the_next_starts_anew(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with chained(root, carry_bytes=8192) as store:
        refs: list[SnapshotRef] = []
        while len(refs) < 12 and (not refs or not stored(root, "s1", refs[0].name)):
            write(sbx, f"workspace/f{len(refs)}.bin", os.urandom(700))
            refs.append(take(sbx, store, refs[-1] if refs else None))
            store.settle()
        assert stored(root, "s1", refs[0].name), "the chain was never folded out"
        folded = [r for r in refs[:-1] if stored(root, "s1", r.name)]
        assert folded and all(  # the folded ones' blobs are stored before their manifests
            set(r.manifest.blobs) <= blob_files(root)  # type: ignore[union-attr]
            for r in folded
        )
        write(sbx, "workspace/next.txt", b"next")
        last = take(sbx, store, refs[-1])
    assert refs[-1].name not in carried_names(root) and carried_names(root)[-1] == last.name
    assert restored(tmp_path, root, "latest") == tree(sbx)


def test_retention_deletes_nothing_it_never_stored(sbx: Path, root: Path) -> None:
    with chained(root) as store:
        objects: Any = store.objects
        ref = None
        for i in range(8):
            write(sbx, "workspace/a.txt", b"%d" % i)
            ref = take(sbx, store, ref)
        store.settle()
    assert not [k for _, k in objects.writes if k.startswith("delete")]


def test_gc_keeps_stored_blobs_only_a_carried_chain_names(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    big = os.urandom(16384)
    contents: dict[str, dict[str, bytes]] = {}
    with chained(root, carry_bytes=8192) as store:
        write(sbx, "workspace/big.bin", big)
        ref = take(sbx, store)  # too large to carry: its blob is stored, its manifest carried
        contents[ref.name] = tree(sbx)
        for i in range(2):
            write(sbx, "workspace/small.txt", b"%d" % i)
            ref = take(sbx, store, ref)
            contents[ref.name] = tree(sbx)
        store.settle()
        assert len(carried_names(root)) == 3 and blob_files(root)
        report = store.gc(TENANT, now=time.time() + LATER)
    assert report.blobs_deleted == 0
    for name, files in contents.items():
        assert restored(tmp_path, root, f"r{name[:12]}", name) == files


def test_an_old_pointer_that_carries_its_latest_alone_is_read_and_followed(
    tmp_path: Path, sbx: Path, root: Path
) -> None:
    with crashing(chained(root)) as store:
        write(sbx, "workspace/a.txt", b"1")
        take(sbx, store)
    doc = pointer_doc(root)
    [[name, manifest]] = doc["carried"]["manifests"]
    doc["v"] = pointer_mod.CARRYING_VERSION  # as a node of the release before wrote it
    doc["carried"] = {"name": name, "manifest": manifest, "blobs": doc["carried"]["blobs"]}
    put_pointer_doc(root, doc)
    assert restored(tmp_path, root, "old") == tree(sbx)
    with chained(root) as store:
        write(sbx, "workspace/b.txt", b"2")
        take(sbx, store)  # compares with the carried latest, and carries it on
    assert carried_names(root)[0] == name
    assert restored(tmp_path, root, "new") == tree(sbx)


def test_a_chain_never_passes_the_carry_budget(tmp_path: Path, sbx: Path, root: Path) -> None:
    """With no fold-out after the writes (a node that dies after each), the chain
    that would pass the budget is stored first, and the next starts anew."""
    budget = 4096
    refs: list[SnapshotRef] = []
    for i in range(10):
        with crashing(chained(root, carry_bytes=budget)) as store:
            write(sbx, f"workspace/f{i}.bin", os.urandom(700))
            refs.append(take(sbx, store, refs[-1] if refs else None))
        raw = pointer_doc(root)["carried"]
        weight = sum(len(m) for _, m in raw["manifests"])
        weight += sum(len(base64.b64decode(b)) for _, b in raw["blobs"])
        assert weight <= budget
    assert any(stored(root, "s1", r.name) for r in refs)  # stored before it was let go
    assert restored(tmp_path, root, "latest") == tree(sbx)
