"""The snapshot store end to end on the local backend, with a host-directory sandbox.

``HostDirBackend`` maps a sandbox's ``/`` to a temporary directory, so these
tests run scan -> pack -> store -> restore -> unpack for real, without
containers. The store counts its primitive calls, so "no round trip" and
"uploaded only what changed" are asserted, not timed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, NotFound, SnapshotError
from sandgrid.wire.objects import LocalObjects
from tests.support.hostdir import HostDirBackend
from tests.support.snapshot_stores import local_store
from worker.snapshots import (
    Manifest,
    ManifestLimits,
    SnapshotRef,
    SnapshotStore,
    restore_sandbox,
    snapshot_sandbox,
    transfer,
)
from worker.snapshots import sync as sync_mod
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.manifest import content_hash

TENANT = "acme"
OTHER = "globex"


class CountingObjects(LocalObjects):
    """Local objects that count their primitive calls."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: Counter[str] = Counter()

    def put(self, key: str, data: bytes) -> None:
        self.calls["put"] += 1
        super().put(key, data)

    def get(self, key: str) -> bytes:
        self.calls["get"] += 1
        return super().get(key)

    def mtime(self, key: str) -> float | None:
        self.calls["mtime"] += 1
        return super().mtime(key)

    def list(self, prefix: str) -> list[str]:
        self.calls["list"] += 1
        return super().list(prefix)

    def delete(self, key: str) -> None:
        self.calls["delete"] += 1
        super().delete(key)


class CountingStore(SnapshotStore):
    """A snapshot store over ``CountingObjects``; ``calls`` are theirs."""

    def __init__(self, root: Path, **kw: Any) -> None:
        self.counting = CountingObjects(root)
        super().__init__(self.counting, **kw)
        self.calls = self.counting.calls


class SpyBackend(HostDirBackend):
    """The host-directory backend, recording what was packed and unpacked."""

    def __init__(self) -> None:
        super().__init__()
        self.packed: list[list[str]] = []
        self.unpacked = 0

    def pack(self, sbx: Path, paths: list[str]) -> bytes:
        self.packed.append(list(paths))
        return super().pack(sbx, paths)

    def unpack(self, sbx: Path, data: bytes, roots: list[str], clear: bool) -> int:
        self.unpacked += 1
        return super().unpack(sbx, data, roots, clear)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    # These tests read and edit the stored form: every snapshot is stored before
    # its pointer (test_snapshots_carried.py covers the pointers that carry one).
    s = CountingStore(
        tmp_path / "store", threads=4, keep=3, small_file_bytes=64 << 10, carry_bytes=0
    )
    yield s
    s.close()


@pytest.fixture
def backend() -> SpyBackend:
    return SpyBackend()


def new_sandbox(tmp_path: Path, name: str = "sbx") -> Path:
    sbx = tmp_path / name
    (sbx / "workspace").mkdir(parents=True)
    (sbx / "home" / "sandbox").mkdir(parents=True)
    return sbx


def write(sbx: Path, rel: str, data: bytes | str, mode: int = 0o644) -> None:
    path = sbx / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def tree(sbx: Path) -> dict[str, tuple[str, int, bytes | str]]:
    """Every entry under the roots: (type, mode, content or link target)."""
    out: dict[str, tuple[str, int, bytes | str]] = {}
    for root in ("workspace", "home/sandbox"):
        for dirpath, dirnames, filenames in os.walk(sbx / root):
            for name in dirnames + filenames:
                p = Path(dirpath, name)
                st = p.lstat()
                rel = str(p.relative_to(sbx))
                if stat.S_ISLNK(st.st_mode):
                    out[rel] = ("link", 0, os.readlink(p))
                elif stat.S_ISDIR(st.st_mode):
                    out[rel] = ("dir", stat.S_IMODE(st.st_mode), "")
                else:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


def populate(sbx: Path) -> None:
    write(sbx, "workspace/main.py", "print('hi')\n")
    write(sbx, "workspace/run.sh", "#!/bin/sh\necho ok\n", 0o755)
    write(sbx, "workspace/empty", b"")
    write(sbx, "workspace/data/big.bin", os.urandom(200_000))
    write(sbx, "workspace/data/copy.bin", (sbx / "workspace/data/big.bin").read_bytes())
    write(sbx, "workspace/" + "long-directory-name/" * 8 + "é ü file.txt", "unicode, long path")
    for i in range(30):
        write(sbx, f"workspace/pkg/mod{i}.py", f"x = {i}\n" * (i + 1))
    write(sbx, "home/sandbox/.bashrc", "export A=1\n")
    (sbx / "workspace/ro").mkdir()
    write(sbx, "workspace/ro/frozen.txt", "cannot touch this")
    (sbx / "workspace/ro").chmod(0o555)
    os.symlink("main.py", sbx / "workspace/link-rel")
    os.symlink("/home/sandbox/.bashrc", sbx / "workspace/link-abs")
    os.symlink("../pkg/mod1.py", sbx / "workspace/data/up")
    os.symlink("/workspace/nowhere", sbx / "workspace/dangling")
    os.symlink("/usr/bin/python3", sbx / "workspace/venv-python")  # a target is data
    os.symlink("../../etc", sbx / "workspace/data/etc")


def snap(
    backend: SpyBackend,
    sbx: Path,
    store: CountingStore,
    previous: Manifest | None = None,
    **kw: Any,
) -> SnapshotRef:
    ref = snapshot_sandbox(
        backend, sbx, store, kw.get("tenant", TENANT), kw.get("session", "s1"), previous
    )
    assert ref is not None
    return ref


# ---- round trip ---------------------------------------------------------------------


def test_restore_reproduces_files_dirs_symlinks_and_modes(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/stale.txt", "must disappear")
    manifest = restore_sandbox(backend, dst, store, TENANT, "s1", ref.name)
    assert manifest.hash == ref.hash
    assert tree(dst) == tree(sbx)


def test_an_empty_workspace_restores_as_empty_roots(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    ref = snap(backend, new_sandbox(tmp_path), store)
    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/old/file", "gone")
    write(dst, "home/sandbox/.old", "gone")
    restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert tree(dst) == {}


def test_restore_latest_by_default_and_by_ref(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/a", "1")
    first = snap(backend, sbx, store)
    write(sbx, "workspace/a", "2")
    snap(backend, sbx, store, first.manifest)
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(backend, dst, store, TENANT, "s1", None)
    assert (dst / "workspace/a").read_text() == "2"
    restore_sandbox(backend, dst, store, TENANT, "s1", first)
    assert (dst / "workspace/a").read_text() == "1"


def test_restore_in_several_tars_fills_read_only_dirs(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync_mod, "MAX_TAR_BYTES", 16 << 10)
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert backend.unpacked > 3
    assert tree(dst) == tree(sbx)


def test_directory_modes_too_many_for_one_tar_are_set_deepest_first(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync_mod, "MAX_TAR_BYTES", 8 << 10)  # about 14 headers a tar
    sbx = new_sandbox(tmp_path)
    for i in range(12):  # nested read-only and untraversable directories
        deep = sbx / "workspace" / f"d{i}" / "inner" / "leaf"
        deep.mkdir(parents=True)
        (deep / "f").write_text(str(i))
    for i in range(12):
        (sbx / "workspace" / f"d{i}" / "inner" / "leaf").chmod(0o500)
        (sbx / "workspace" / f"d{i}" / "inner").chmod(0o100 if i % 2 else 0o555)
        (sbx / "workspace" / f"d{i}").chmod(0o500)
    ref = snap(backend, sbx, store)
    dst = new_sandbox(tmp_path, "dst")
    before = backend.unpacked
    restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert backend.unpacked - before > 4  # several content tars, then several mode tars
    assert tree(dst) == tree(sbx)


def test_pack_is_asked_in_frame_sized_batches(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync_mod, "PACK_BATCH_BYTES", 100 << 10)
    sbx = new_sandbox(tmp_path)
    for i in range(5):
        write(sbx, f"workspace/f{i}", os.urandom(60 << 10))
    snap(backend, sbx, store)
    assert len(backend.packed) >= 3
    assert sorted(p for batch in backend.packed for p in batch) == [
        f"/workspace/f{i}" for i in range(5)
    ]


# ---- incremental --------------------------------------------------------------------


def test_unchanged_workspace_costs_no_round_trip(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    store.calls.clear()
    backend.packed.clear()
    t0 = time.perf_counter()
    assert snapshot_sandbox(backend, sbx, store, TENANT, "s1", ref.manifest) is None
    assert time.perf_counter() - t0 < 0.5
    assert store.calls == Counter()
    assert backend.packed == []


def test_unchanged_workspace_without_previous_reads_only_the_pointer(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    snap(backend, sbx, store)
    store.calls.clear()
    assert snapshot_sandbox(backend, sbx, store, TENANT, "s1", None) is None
    assert store.calls == Counter(get=1)


def test_one_changed_file_uploads_one_blob(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    backend.packed.clear()
    write(sbx, "workspace/pkg/mod3.py", "x = 'changed'\n")
    ref2 = snap(backend, sbx, store, ref.manifest)
    assert backend.packed == [["/workspace/pkg/mod3.py"]]
    assert ref2.stats["uploaded_blobs"] == 1
    assert ref2.seq == ref.seq + 1
    assert ref2.manifest is not None and ref2.manifest.parent == f"s1/{ref.name}"


def test_small_files_travel_in_packs_and_duplicates_once(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    packed = [p for batch in backend.packed for p in batch]
    assert "/workspace/data/big.bin" in packed
    assert "/workspace/data/copy.bin" not in packed  # same content: packed once
    blobs = store.objects.list(f"t/{TENANT}/blobs/")
    assert len(blobs) == 2  # one pack of all small files + the large file
    assert ref.stats["uploaded_blobs"] == 2


def _in_a_second_session(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, big: bytes
) -> tuple[SnapshotRef | None, CountingStore]:
    """``big`` stored by session s1, then snapshotted in s2 by a fresh process (no
    memory of the blob: a HEAD finds it); s2's ref and that process's store."""
    one = new_sandbox(tmp_path, "one")
    write(one, "workspace/model.bin", big)
    snap(backend, one, store, session="s1")
    fresh = CountingStore(store.objects.root, threads=2, small_file_bytes=64 << 10)
    two = new_sandbox(tmp_path, "two")
    write(two, "workspace/weights/model.bin", big)
    backend.packed.clear()
    ref = snapshot_sandbox(backend, two, fresh, TENANT, "s2", None)
    fresh.close()
    return ref, fresh


def test_large_file_stored_by_another_session_is_not_uploaded_again(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    big = os.urandom(300_000)
    ref, fresh = _in_a_second_session(tmp_path, store, backend, big)
    # Packed while its HEAD ran (it is under OVERLAP_HEAD_BYTES), never uploaded.
    assert ref is not None and backend.packed == [["/workspace/weights/model.bin"]]
    assert ref.stats["uploaded_blobs"] == 0 and fresh.calls["mtime"] == 1
    assert ref.manifest is not None
    assert ref.manifest.blobs == {hashlib.sha256(big).hexdigest(): len(big)}
    # The same process remembers it: not even the HEAD.
    store.calls.clear()
    three = new_sandbox(tmp_path, "three")
    write(three, "workspace/model.bin", big)
    snap(backend, three, store, session="s3")
    assert store.calls["mtime"] == 0


def test_a_large_file_over_the_overlap_waits_for_its_head_and_is_not_packed(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "OVERLAP_HEAD_BYTES", 100_000)
    ref, fresh = _in_a_second_session(tmp_path, store, backend, os.urandom(300_000))
    assert ref is not None and backend.packed == [] and ref.stats["uploaded_blobs"] == 0
    assert fresh.calls["mtime"] == 1


def test_a_new_large_file_packed_beside_its_head_is_uploaded_and_restores(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    big = os.urandom(300_000)
    write(sbx, "workspace/model.bin", big)
    ref = snap(backend, sbx, store)
    assert ref.stats["uploaded_blobs"] == 1 and store.calls["mtime"] == 1
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
    assert (dst / "workspace/model.bin").read_bytes() == big


@pytest.mark.parametrize("rewrite", ["second, longer", "FIRST"])
def test_file_changing_during_snapshot_is_scanned_again(
    tmp_path: Path, store: CountingStore, rewrite: str
) -> None:
    """A change of size is seen in the pack; one to the same size by the commit's
    one hash of each content (``transfer.put_blob``). Either way: scan again."""
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/log.txt", "first")

    class Racing(HostDirBackend):
        raced = False

        def pack(self, sbx: Path, paths: list[str]) -> bytes:
            if not self.raced:
                self.raced = True
                write(sbx, "workspace/log.txt", rewrite)
            return super().pack(sbx, paths)

    ref = snapshot_sandbox(Racing(), sbx, store, TENANT, "s1", None)
    assert ref is not None and ref.stats["attempts"] == 2
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
    assert (dst / "workspace/log.txt").read_text() == rewrite


# ---- verification -------------------------------------------------------------------


def _blob_path(store: SnapshotStore, tenant: str = TENANT) -> list[Path]:
    return sorted((store.objects.root / "t" / tenant / "blobs").iterdir())


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "swap"])
def test_damaged_blob_is_refused_and_the_sandbox_untouched(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, damage: str
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    blob = max(_blob_path(store), key=lambda p: p.stat().st_size)
    raw = bytearray(blob.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
        blob.write_bytes(bytes(raw))
    elif damage == "truncate":
        blob.write_bytes(bytes(raw[: len(raw) // 2]))
    elif damage == "delete":
        blob.unlink()
    else:  # well-formed bytes of the right size, but not the content named
        blob.write_bytes(encode(os.urandom(len(decode(bytes(raw))))))
    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/keep.txt", "still here")
    before = tree(dst)
    with pytest.raises(SnapshotError) as err:
        restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert backend.unpacked == 0
    assert tree(dst) == before


def _manifest_file(store: SnapshotStore, ref: SnapshotRef, tenant: str = TENANT) -> Path:
    return store.objects.root / "t" / tenant / "s" / ref.session_id / "snap" / f"{ref.name}.json"


def _edit_manifest(path: Path, edit: Any, rehash: bool = True) -> None:
    doc = json.loads(bytes(decode(path.read_bytes())))
    edit(doc)
    if rehash:
        from worker.snapshots.format.entries import Entry

        doc["hash"] = content_hash(doc["roots"], [Entry(*r[:6]) for r in doc["entries"]])
    path.write_bytes(encode(json.dumps(doc).encode()))


def _set_first_file(doc: dict[str, Any], **fields: Any) -> None:
    row = next(r for r in doc["entries"] if r[1] == "file")
    for name, value in fields.items():
        row[["path", "type", "mode", "size", "sha256", "target", "blob", "offset"].index(name)] = (
            value
        )


HOSTILE_EDITS = {
    "path outside roots": lambda d: _set_first_file(d, path="/etc/cron.d/evil"),
    "dot-dot path": lambda d: _set_first_file(d, path="/workspace/../etc/passwd"),
    "device file": lambda d: _set_first_file(d, type="chardev"),
    "file under a symlink out": lambda d: d["entries"].extend(
        [
            ["/workspace/zz-escape", "symlink", 0o777, 0, None, "/etc", None, None],
            ["/workspace/zz-escape/cron", "dir", 0o755, 0, None, None, None, None],
        ]
    ),
    "entry under a symlink": lambda d: d["entries"].append(
        ["/workspace/link-rel/x", "dir", 0o755, 0, None, None, None, None]
    ),
    "content not in any blob": lambda d: _set_first_file(d, blob=None),
    "blob index out of range": lambda d: _set_first_file(d, blob=99),
    "offset past the blob": lambda d: _set_first_file(d, offset=10**9),
    "other tenant": lambda d: d.__setitem__("tenant", OTHER),
    "other session": lambda d: d.__setitem__("session", "s9"),
    "unknown version": lambda d: d.__setitem__("v", 99),
}


@pytest.mark.parametrize("edit", list(HOSTILE_EDITS), ids=list(HOSTILE_EDITS))
def test_hostile_manifest_is_refused(
    tmp_path: Path, store: CountingStore, backend: SpyBackend, edit: str
) -> None:
    sbx = new_sandbox(tmp_path)
    populate(sbx)
    ref = snap(backend, sbx, store)
    _edit_manifest(_manifest_file(store, ref), HOSTILE_EDITS[edit])
    dst = new_sandbox(tmp_path, "dst")
    with pytest.raises(SnapshotError) as err:
        restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert backend.unpacked == 0


def test_manifest_edited_without_rehash_is_refused(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/a", "a")
    ref = snap(backend, sbx, store)
    _edit_manifest(_manifest_file(store, ref), lambda d: _set_first_file(d, mode=0o777), False)
    with pytest.raises(SnapshotError, match="hash"):
        store.load(TENANT, "s1", ref)


def test_manifest_with_foreign_roots_is_refused(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/a", "a")
    ref = snap(backend, sbx, store)

    def to_etc(doc: dict[str, Any]) -> None:
        doc["roots"] = ["/etc"]
        for row in doc["entries"]:
            row[0] = "/etc" + row[0][len("/workspace") :]

    _edit_manifest(_manifest_file(store, ref), to_etc)
    with pytest.raises(SnapshotError, match="roots"):
        restore_sandbox(backend, new_sandbox(tmp_path, "dst"), store, TENANT, "s1", ref)
    assert backend.unpacked == 0


def test_unpack_failure_says_the_sandbox_is_dirty(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/a", "a")
    ref = snap(backend, sbx, store)

    class Broken(HostDirBackend):
        def unpack(self, sbx: Path, data: bytes, roots: list[str], clear: bool) -> int:
            raise OSError("channel broke")

    with pytest.raises(SnapshotError) as err:
        restore_sandbox(Broken(), new_sandbox(tmp_path, "dst"), store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_FAILED
    assert err.value.context["sandbox_dirty"] is True


# ---- hostile sandboxes --------------------------------------------------------------


class Scripted(HostDirBackend):
    """A sandbox whose scan or pack says what a compromised agent would."""

    def __init__(self, scan: list[dict[str, Any]] | None = None, pack: bytes | None = None):
        super().__init__()
        self._scan, self._pack = scan, pack

    def scan(self, sbx: Path, roots: list[str]) -> list[dict[str, Any]]:
        return self._scan if self._scan is not None else super().scan(sbx, roots)

    def pack(self, sbx: Path, paths: list[str]) -> bytes:
        return self._pack if self._pack is not None else super().pack(sbx, paths)


def _file(path: str, data: bytes = b"x") -> dict[str, Any]:
    import hashlib

    sha = hashlib.sha256(data).hexdigest()
    return {"path": path, "type": "file", "mode": 0o644, "size": len(data), "sha256": sha}


@pytest.mark.parametrize(
    ("entry", "code"),
    [
        (_file("/etc/passwd"), ErrorCode.PATH_OUTSIDE_WORKSPACE),
        (_file("/workspace/../etc/passwd"), ErrorCode.INVALID_INPUT),
        (_file("workspace/relative"), ErrorCode.INVALID_INPUT),
        ({**_file("/workspace/dev"), "type": "blockdev"}, ErrorCode.INVALID_INPUT),
        (
            {"path": "/workspace/l", "type": "symlink", "mode": 0o777, "size": 0, "target": ""},
            ErrorCode.INVALID_INPUT,
        ),
    ],
)
def test_hostile_scan_is_refused_and_nothing_stored(
    tmp_path: Path, store: CountingStore, entry: dict[str, Any], code: ErrorCode
) -> None:
    sbx = new_sandbox(tmp_path)
    with pytest.raises(InvalidInput) as err:
        snapshot_sandbox(Scripted(scan=[entry]), sbx, store, TENANT, "s1", None)
    assert err.value.code == code
    assert store.calls["put"] == 0


def test_hostile_pack_is_refused_and_no_snapshot_written(
    tmp_path: Path, store: CountingStore
) -> None:
    from worker.snapshots.format.archive import tar_member

    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/a", "x")
    evil = tar_member("etc/shadow", b"0", 0o644, 1) + b"x" + bytes(511) + bytes(1024)
    with pytest.raises(SnapshotError) as err:
        snapshot_sandbox(Scripted(pack=evil), sbx, store, TENANT, "s1", None)
    assert err.value.code == ErrorCode.SNAPSHOT_FAILED
    assert store.snapshots(TENANT, "s1") == []


# ---- limits and ids -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "name"),
    [(ManifestLimits(max_files=5), "max_files"), (ManifestLimits(max_bytes=1000), "max_bytes")],
)
def test_limits_name_the_limit(tmp_path: Path, limits: ManifestLimits, name: str) -> None:
    sbx = new_sandbox(tmp_path)
    for i in range(6):
        write(sbx, f"workspace/f{i}", "y" * 300)
    with (
        local_store(tmp_path / "store", limits=limits) as small,
        pytest.raises(InvalidInput) as err,
    ):
        snapshot_sandbox(HostDirBackend(), sbx, small, TENANT, "s1", None)
    assert err.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert name in err.value.message and err.value.context["limit"] == name


@pytest.mark.parametrize("bad", ["", "a/b", "..", "a..b", "../t", ".hidden", "x" * 200, "a b"])
def test_ids_are_validated_before_any_key_is_built(store: CountingStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        store.load(bad, "s1")
    with pytest.raises(InvalidInput):
        store.load(TENANT, bad)
    with pytest.raises(InvalidInput):
        store.load(TENANT, "s1", bad)
    assert sum(store.calls.values()) == 0


def test_previous_of_another_session_is_refused(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/a", "a")
    ref = snap(backend, sbx, store)
    with pytest.raises(InvalidInput, match="previous"):
        snapshot_sandbox(backend, sbx, store, TENANT, "s2", ref.manifest)


# ---- tenant isolation ---------------------------------------------------------------


def test_a_tenant_cannot_reach_another_tenants_snapshots(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/secret", "acme only")
    ref = snap(backend, sbx, store)
    assert store.snapshots(OTHER, "s1") == []
    with pytest.raises(NotFound):
        store.load(OTHER, "s1")
    with pytest.raises(NotFound):
        store.load(OTHER, "s1", ref.name)
    with pytest.raises(InvalidInput):
        store.load(OTHER, "s1", ref)
    with pytest.raises(NotFound):
        store.fork(OTHER, "s1", "s2")
    # Content known to tenant acme is not "known" to tenant globex: it uploads its own.
    other = new_sandbox(tmp_path, "other")
    write(other, "workspace/secret", "acme only")
    backend.packed.clear()
    snapshot_sandbox(backend, other, store, OTHER, "s1", None)
    assert backend.packed == [["/workspace/secret"]]
    assert len(_blob_path(store, OTHER)) == 1


def test_manifest_copied_into_another_tenant_is_refused(
    tmp_path: Path, store: CountingStore, backend: SpyBackend
) -> None:
    sbx = new_sandbox(tmp_path)
    write(sbx, "workspace/secret", "acme only")
    ref = snap(backend, sbx, store)
    src = store.objects.root / "t" / TENANT / "s" / "s1"
    dst = store.objects.root / "t" / OTHER / "s" / "s1"
    (dst / "snap").mkdir(parents=True)
    (dst / "latest").write_bytes((src / "latest").read_bytes())
    (dst / "snap" / f"{ref.name}.json").write_bytes(_manifest_file(store, ref).read_bytes())
    with pytest.raises(SnapshotError) as err:
        store.load(OTHER, "s1")
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
