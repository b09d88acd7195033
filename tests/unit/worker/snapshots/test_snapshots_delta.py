"""Incremental snapshots: a change validated and hashed on its own, manifests stored
as differences, and every way a difference can be wrong."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, SnapshotError
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import new_sandbox
from tests.support.snapshot_stores import local_store
from worker.agent import limits
from worker.snapshots import Manifest, SnapshotStore, restore_sandbox
from worker.snapshots import snapshot_sandbox as _snapshot_sandbox
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.delta import MIN_DELTA, diff
from worker.snapshots.format.entries import Entry, ManifestLimits, entries_from_scan, scan_rows
from worker.snapshots.format.manifest import content_hash

TENANT = "acme"
ROOTS = limits.ROOTS
LIMITS = ManifestLimits()
SHA = "ab" * 32


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SnapshotStore]:
    # These tests read and edit the stored form: every snapshot is stored before
    # its pointer (test_snapshots_carried.py covers the pointers that carry one).
    s = local_store(tmp_path / "store", keep=3, threads=2, small_file_bytes=1024, carry_bytes=0)
    yield s
    s.close()


@pytest.fixture
def sbx(tmp_path: Path) -> Path:
    return new_sandbox(tmp_path, "sbx")


def put(sbx: Path, rel: str, data: bytes) -> None:
    path = sbx / "workspace" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def take(sbx: Path, store: SnapshotStore, previous: Manifest | None) -> Manifest:
    ref = _snapshot_sandbox(HostDirBackend(), sbx, store, TENANT, "s1", previous)
    assert ref is not None and ref.manifest is not None
    return ref.manifest


def _manifest_path(store: SnapshotStore, m: Manifest) -> Path:
    return store.objects.root / "t" / TENANT / "s" / "s1" / "snap" / f"{m.name}.json"


def stored_doc(store: SnapshotStore, m: Manifest) -> dict[str, Any]:
    return dict(json.loads(bytes(decode(_manifest_path(store, m).read_bytes()))))


def rewrite(store: SnapshotStore, m: Manifest, edit: Any) -> None:
    doc = stored_doc(store, m)
    edit(doc)
    _manifest_path(store, m).write_bytes(encode(json.dumps(doc).encode()))


def tree(sbx: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted((sbx / "workspace").rglob("*")):
        rel = str(p.relative_to(sbx))
        out[rel] = (
            "link:" + str(p.readlink())
            if p.is_symlink()
            else ("dir" if p.is_dir() else p.read_bytes())
        )
    return out


# ---- diff: the incremental path agrees with the full one ------------------------------


def f(path: str, size: int = 1) -> Entry:
    return Entry(path, "file", 0o644, size, SHA, None)


def d(path: str) -> Entry:
    return Entry(path, "dir", 0o755, 0, None, None)


def ln(path: str, target: str = "x") -> Entry:
    return Entry(path, "symlink", 0o777, 0, None, target)


def manifest_of(entries: list[Entry]) -> Manifest:
    es = entries_from_scan(scan_rows(entries), ROOTS, LIMITS)
    return Manifest(
        tenant=TENANT,
        session_id="s1",
        seq=1,
        snapshot_id="0" * 12,
        created=0.0,
        parent=None,
        roots=ROOTS,
        entries=es,
        hash=content_hash(ROOTS, es),
        where={},
        blobs={},
    )


def test_the_incremental_hash_is_the_full_hash() -> None:
    rng = random.Random(5)
    entries = [d("/workspace/a"), d("/workspace/b"), d("/workspace/a/c")]
    entries += [f(f"/workspace/{rng.choice('ab')}/f{i}", i) for i in range(200)]
    previous = manifest_of(entries)
    for _ in range(30):
        rows = [e for e in previous.entries if rng.random() > 0.02]  # some removed
        rows += [f(f"/workspace/a/c/n{rng.randrange(1000)}", rng.randrange(9)) for _ in range(3)]
        rows = [
            f(e.path, e.size + 1) if rng.random() < 0.01 and e.type == "file" else e for e in rows
        ]
        rows = list({e.path: e for e in rows}.values())
        change = diff(previous, scan_rows(rows), ROOTS, LIMITS)
        assert change is not None
        assert change.hash == content_hash(ROOTS, rows)
        assert list(change.entries) == sorted(rows)
        previous = dataclasses.replace(
            previous,
            entries=change.entries,
            hash=change.hash,
            known=change.known(),
        )


BASE = [d("/workspace/d"), f("/workspace/d/x"), f("/workspace/y")]


@pytest.mark.parametrize(
    ("new", "rule"),
    [
        ([*BASE, f("/etc/passwd")], "outside the roots"),
        ([*BASE, f("/workspace/../x")], "normalised"),
        ([*BASE, Entry("/workspace/p", "fifo", 0o644, 0, None, None)], "device"),
        ([*BASE, ln("/workspace/l", "/etc"), f("/workspace/l/cron")], "which is a symlink"),
        ([*BASE, f("/workspace/y/z")], "which is a file"),
        (
            [ln("/workspace/d", "/etc"), f("/workspace/d/x"), f("/workspace/y")],
            "which is a symlink",
        ),
        ([*BASE, f("/workspace/y", 2)], "twice"),
        ([*BASE, f("/workspace/big", 10**6)], "max_bytes"),
    ],
)
def test_a_change_is_validated_like_a_whole_tree(new: list[Entry], rule: str) -> None:
    limits = ManifestLimits(max_bytes=1000)
    previous = manifest_of(BASE)
    with pytest.raises(InvalidInput, match=rule):
        entries_from_scan(scan_rows(new), ROOTS, limits)
    change = None
    with pytest.raises(InvalidInput, match=rule):
        change = diff(previous, scan_rows(new), ROOTS, limits)
    assert change is None


def test_too_many_entries_through_a_change_names_the_limit() -> None:
    previous = manifest_of(BASE)
    with pytest.raises(InvalidInput, match="max_files"):
        diff(previous, scan_rows([*BASE, f("/workspace/z")]), ROOTS, ManifestLimits(max_files=3))


def test_a_large_change_is_left_to_the_full_path() -> None:
    previous = manifest_of(BASE)
    many = [*BASE, *(f(f"/workspace/n{i}") for i in range(MIN_DELTA + 1))]
    assert diff(previous, scan_rows(many), ROOTS, LIMITS) is None


# ---- stored as differences ----------------------------------------------------------


def test_a_small_change_is_stored_as_a_difference_and_restores(
    tmp_path: Path, sbx: Path, store: SnapshotStore
) -> None:
    for i in range(50):
        put(sbx, f"pkg{i % 5}/f{i}", b"%d" % i)
    first = take(sbx, store, None)
    assert first.base is None
    put(sbx, "pkg1/f1", b"changed")
    (sbx / "workspace/pkg2/f2").unlink()
    (sbx / "workspace/pkg3").rename(sbx / "workspace/moved")
    second = take(sbx, store, first)
    doc = stored_doc(store, second)
    assert doc["base"] == first.name and "entries" not in doc
    assert len(doc["upsert"]) == 12 and len(doc["remove"]) == 12  # pkg3 + its 10 files, f2
    assert second.hash == content_hash(ROOTS, second.entries)
    fresh = local_store(
        store.objects.root, small_file_bytes=1024
    )  # nothing cached: read it all back
    dst = new_sandbox(tmp_path, "dst")
    back = restore_sandbox(HostDirBackend(), dst, fresh, TENANT, "s1", None)
    assert back.name == second.name and back.hash == second.hash
    assert tree(dst) == tree(sbx)


def test_differences_accumulate_against_one_base_then_a_full_one(
    sbx: Path, store: SnapshotStore
) -> None:
    n = MIN_DELTA + 8
    for i in range(n):
        put(sbx, f"f{i:02d}", b"v0")
    m = first = take(sbx, store, None)
    bases, names = [], []
    for i in range(n):
        put(sbx, f"f{i:02d}", b"v1")
        m = take(sbx, store, m)
        bases.append(m.base)
        names.append(m.name)
    assert set(bases[:MIN_DELTA]) == {first.name}
    assert bases[MIN_DELTA] is None  # the difference grew past the threshold: stored full
    assert set(bases[MIN_DELTA + 1 :]) == {names[MIN_DELTA]}
    assert store.load(TENANT, "s1", m.name).hash == m.hash


def test_a_snapshot_after_another_workers_follows_the_stored_latest(
    sbx: Path, store: SnapshotStore
) -> None:
    put(sbx, "a", b"1")
    first = take(sbx, store, None)
    put(sbx, "a", b"2")
    take(sbx, store, first)  # another worker moved the session on
    put(sbx, "a", b"3")
    third = take(sbx, store, first)  # this worker still holds the first
    assert third.base is None  # not a difference from a manifest that is not the latest
    assert store.load(TENANT, "s1", third.name).hash == third.hash


HOSTILE_DIFFS = {
    "base missing": lambda doc: doc.update(base="000000000000-aaaaaaaaaaaa"),
    "base not a name": lambda doc: doc.update(base="../../latest"),
    "base is itself": lambda doc: doc.update(base=f"{doc['seq']:012d}-{doc['id']}"),
    "remove not paths": lambda doc: doc.update(remove=[1]),
    "upsert row short": lambda doc: doc["upsert"].append(["/workspace/x"]),
    "upsert twice": lambda doc: doc["upsert"].append(doc["upsert"][0]),
    "upsert escapes": lambda doc: doc["upsert"].append(
        ["/etc/cron", "dir", 0o755, 0, None, None, None, None]
    ),
    "edited without rehash": lambda doc: doc["upsert"][0].__setitem__(2, 0o777),
    "removal without rehash": lambda doc: doc["remove"].append("/workspace/b"),
}


@pytest.mark.parametrize("edit", list(HOSTILE_DIFFS), ids=list(HOSTILE_DIFFS))
def test_a_bad_difference_is_refused(
    tmp_path: Path, sbx: Path, store: SnapshotStore, edit: str
) -> None:
    put(sbx, "a", b"1")
    put(sbx, "b", b"2")
    first = take(sbx, store, None)
    put(sbx, "a", b"changed")
    second = take(sbx, store, first)
    rewrite(store, second, HOSTILE_DIFFS[edit])
    dst = new_sandbox(tmp_path, "dst")
    put(dst, "keep", b"untouched")
    with pytest.raises(SnapshotError) as err:
        restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", None)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert (dst / "workspace/keep").read_bytes() == b"untouched"


def test_a_difference_based_on_a_difference_is_refused(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", b"1")
    first = take(sbx, store, None)
    put(sbx, "a", b"2")
    second = take(sbx, store, first)
    put(sbx, "a", b"3")
    third = take(sbx, store, second)
    rewrite(store, third, lambda doc: doc.update(base=second.name))
    with pytest.raises(SnapshotError, match="not an earlier full manifest"):
        store.load(TENANT, "s1", third.name)


def test_fork_of_a_difference_is_stored_full(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "a", b"1")
    first = take(sbx, store, None)
    put(sbx, "a", b"2")
    take(sbx, store, first)
    ref = store.fork(TENANT, "s1", "s2")
    forked = store.load(TENANT, "s2", ref)
    assert forked.base is None and forked.hash == store.load(TENANT, "s1").hash


def test_counts_kept_by_the_change_match_a_recount(sbx: Path, store: SnapshotStore) -> None:
    put(sbx, "same1", b"dup")
    put(sbx, "same2", b"dup")
    put(sbx, "big", bytes(4096))
    m = take(sbx, store, None)
    steps = [
        lambda: (sbx / "workspace/same1").unlink(),  # the content stays, held by same2
        lambda: put(sbx, "big", bytes(4095) + b"x"),  # a large blob goes, another comes
        lambda: (sbx / "workspace/same2").rename(sbx / "workspace/moved"),
        lambda: put(sbx, "new", b"dup"),  # a content already stored
        lambda: (sbx / "workspace/moved").unlink(),
    ]
    for step in steps:
        step()
        m = take(sbx, store, m)
        assert m.base is not None  # the incremental path
        files = [e for e in m.entries if e.sha256]
        assert set(m.where) == {e.sha256 for e in files}
        assert set(m.blobs) == {loc.blob for loc in m.where.values()}
        assert dict(m.sha_refs) == dict(Counter(e.sha256 for e in files))
        assert dict(m.blob_refs) == dict(Counter(loc.blob for loc in m.where.values()))
