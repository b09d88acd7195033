"""A restore over ``STREAM_RESTORE_BYTES`` goes in parts, with bounded memory.

End to end over ``LocalObjects`` and ``HostDirBackend`` with small thresholds
(a part is a few KiB), on a workspace of many parts: the tree comes back
exactly (files, read-only directories, symlinks, modes, large files), the parts
are the tars a single pass would send, blobs are downloaded as parts go (not
all first), a damaged blob of a later part says the sandbox is dirty while one
of the first part leaves it untouched, and the bytes the restore holds at once
(``tracemalloc``, not a clock) stay under the bound for a workspace several
times larger.
"""

from __future__ import annotations

import hashlib
import os
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InfrastructureError, SnapshotError
from sandgrid.wire.objects import LocalObjects
from sandgrid.wire.objects import keys as store_keys
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import new_sandbox, tree, write
from worker.snapshots import SnapshotStore, restore_sandbox, snapshot_sandbox
from worker.snapshots import sync as sync_mod
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.manifest import Manifest
from worker.snapshots.refs import SnapshotRef

TENANT = "acme"
KIB = 1 << 10
TAR = 32 * KIB
"""``max_tar_bytes`` here: a part holds about this much content."""
LARGE = 96 * KIB
STREAM = 128 * KIB
THREADS = 2
PACK = 16 * KIB


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_mod, "STREAM_RESTORE_BYTES", STREAM)
    monkeypatch.setattr(sync_mod, "MAX_TAR_BYTES", TAR)
    monkeypatch.setattr(sync_mod, "LARGE_FILE_BYTES", LARGE)
    monkeypatch.setattr(sync_mod, "CHUNK_BYTES", 32 * KIB)


class Log:
    """One ordered record of what the store and the sandbox were asked."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def first(self, kind: str) -> int:
        return next(i for i, (k, _) in enumerate(self.events) if k == kind)

    def last(self, kind: str) -> int:
        return max(i for i, (k, _) in enumerate(self.events) if k == kind)

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)


class LoggingStore(SnapshotStore):
    """A local store that logs each blob download, and can go down after ``fail_after``.

    While ``tracemalloc`` traces, ``load`` restarts its peak once the manifest is
    loaded (parsing it costs what it costs in one pass or in parts), and notes
    how much was held then in ``loaded``."""

    def __init__(self, root: Path, log: Log, **kw: Any) -> None:
        super().__init__(LoggingObjects(root, self), **kw)
        self.log = log
        self.fail_after: int | None = None
        self.loaded = 0

    def load(self, tenant: str, session_id: str, ref: SnapshotRef | str | None = None) -> Manifest:
        manifest = super().load(tenant, session_id, ref)
        if tracemalloc.is_tracing():
            tracemalloc.reset_peak()
            self.loaded = tracemalloc.get_traced_memory()[0]
        return manifest


class LoggingObjects(LocalObjects):
    """The objects of a ``LoggingStore``: each blob read is logged, or fails once
    the store's ``fail_after`` reads happened."""

    def __init__(self, root: Path, store: LoggingStore) -> None:
        super().__init__(root)
        self.store = store

    def get(self, key: str) -> bytes:
        if "/blobs/" in key:
            if (
                self.store.fail_after is not None
                and self.store.log.count("get") >= self.store.fail_after
            ):
                raise InfrastructureError(
                    "snapshot store is unavailable",
                    code=ErrorCode.STORE_UNAVAILABLE,
                    retryable=True,
                )
            self.store.log.events.append(("get", key))
        return super().get(key)


class LoggingBackend(HostDirBackend):
    """The host-directory backend, logging each tar (its sha256) and each chunk."""

    def __init__(self, log: Log) -> None:
        super().__init__()
        self.log = log

    def unpack(self, sbx: Path, data: bytes, roots: list[str], clear: bool) -> int:
        self.log.events.append(("unpack", hashlib.sha256(data).hexdigest()))
        return super().unpack(sbx, data, roots, clear)

    def write_range(
        self,
        sbx: Path,
        path: str,
        offset: int,
        data: bytes | memoryview,
        roots: list[str],
        **kw: Any,
    ) -> int:
        self.log.events.append(("write_range", f"{path}@{offset}"))
        return super().write_range(sbx, path, offset, data, roots, **kw)


@pytest.fixture
def log() -> Log:
    return Log()


@pytest.fixture
def store(tmp_path: Path, log: Log) -> Iterator[LoggingStore]:
    s = LoggingStore(
        tmp_path / "store", log, threads=THREADS, small_file_bytes=8 * KIB, pack_bytes=PACK
    )
    yield s
    s.close()


def populate(sbx: Path, scale: int = 1, seed: int = 3) -> None:
    """Every kind of entry, in about ``scale`` x 700 KiB: small files (packs),
    mid-sized ones (blobs of their own), large ones (chunks), duplicates,
    read-only directories (one holding a large file), symlinks, odd names."""
    rng = random.Random(seed)
    text = b"".join(b"line %d of some source text\n" % i for i in range(20_000))

    def data(size: int) -> bytes:
        if rng.random() < 0.5:
            return rng.randbytes(size)
        start = rng.randrange(0, len(text) - size)
        return text[start : start + size]

    for i in range(120 * scale):
        mode = 0o755 if i % 7 == 0 else 0o644
        write(sbx, f"workspace/pkg{i % 9}/mod{i:04d}.py", data(rng.randint(0, 3 * KIB)), mode)
    for i in range(12 * scale):
        write(sbx, f"workspace/data/blob{i:03d}.bin", data(rng.randint(10 * KIB, 40 * KIB)))
    for i in range(2 * scale):
        write(sbx, f"workspace/models/m{i}.bin", data(LARGE + rng.randint(1, 60 * KIB)), 0o640)
    write(sbx, "workspace/data/copy.bin", (sbx / "workspace/data/blob000.bin").read_bytes())
    write(sbx, "workspace/empty", b"")
    write(sbx, "workspace/" + "long-directory-name/" * 8 + "é ü file.txt", b"long path")
    write(sbx, "home/sandbox/.bashrc", b"export A=1\n")
    write(sbx, "workspace/ro/frozen.txt", b"cannot touch this")
    write(sbx, "workspace/ro/big.bin", data(LARGE + 5), 0o444)
    write(sbx, "workspace/zz/late.txt", b"the last file in path order")
    (sbx / "workspace/ro").chmod(0o555)
    (sbx / "workspace/zz").chmod(0o500)
    os.symlink("../pkg1/mod0001.py", sbx / "workspace/data/up")
    os.symlink("/usr/bin/python3", sbx / "workspace/venv-python")
    os.symlink("/workspace/nowhere", sbx / "workspace/dangling")


def snap(sbx: Path, store: SnapshotStore) -> SnapshotRef:
    ref = snapshot_sandbox(HostDirBackend(), sbx, store, TENANT, "s1", None)
    assert ref is not None
    return ref


def restore(store: SnapshotStore, log: Log, dst: Path, ref: SnapshotRef) -> None:
    log.events.clear()
    restore_sandbox(LoggingBackend(log), dst, store, TENANT, "s1", ref)


# ---- round trip -------------------------------------------------------------------------


def test_a_restore_in_parts_reproduces_the_tree_exactly(
    tmp_path: Path, store: LoggingStore, log: Log
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    populate(sbx)
    ref = snap(sbx, store)
    assert ref.manifest.total_bytes > 4 * STREAM
    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/stale.txt", b"must disappear")
    restore(store, log, dst, ref)
    assert tree(dst) == tree(sbx)
    assert log.count("unpack") > 10
    # streamed: blobs are downloaded after the first tar went in, and the
    # large files' chunks come after the last content tar, before the modes tar
    assert log.last("get") > log.first("unpack")
    assert log.first("unpack") < log.first("write_range") < log.last("unpack")
    assert log.events[-1][0] == "unpack"


def test_the_parts_are_the_tars_a_single_pass_sends(
    tmp_path: Path, store: LoggingStore, log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    populate(sbx)
    ref = snap(sbx, store)
    dst = new_sandbox(tmp_path, "dst")
    restore(store, log, dst, ref)
    streamed = [e for e in log.events if e[0] != "get"]
    streamed_gets = log.count("get")

    monkeypatch.setattr(sync_mod, "STREAM_RESTORE_BYTES", 1 << 30)
    restore(store, log, dst, ref)
    assert [e for e in log.events if e[0] != "get"] == streamed
    assert log.last("get") < log.first("unpack")  # one pass: everything verified first
    assert log.count("get") == len(ref.manifest.blobs)
    # in parts, a pack that spans two tars is downloaded for each: a few, not every one
    assert len(ref.manifest.blobs) <= streamed_gets <= len(ref.manifest.blobs) + len(streamed)
    assert tree(dst) == tree(sbx)


def test_a_small_restore_stays_one_pass(tmp_path: Path, store: LoggingStore, log: Log) -> None:
    sbx = new_sandbox(tmp_path, "src")
    write(sbx, "workspace/a.txt", b"a" * 1000)
    write(sbx, "workspace/b.bin", os.urandom(LARGE + 1))
    ref = snap(sbx, store)
    assert ref.manifest.total_bytes < STREAM
    dst = new_sandbox(tmp_path, "dst")
    restore(store, log, dst, ref)
    assert log.last("get") < log.first("unpack")
    assert tree(dst) == tree(sbx)


# ---- damage -------------------------------------------------------------------------------


def _damage(store: SnapshotStore, ref: SnapshotRef, sbx: Path, rel: str, how: str) -> None:
    """Delete the blob holding the file ``rel``, or flip a byte of that file in it."""
    content = (sbx / rel).read_bytes()
    loc = ref.manifest.where[hashlib.sha256(content).hexdigest()]
    key = store_keys.blob_key(TENANT, loc.blob)
    if how == "delete":
        store.objects.delete(key)
        return
    data = bytearray(decode(store.objects.get(key)))
    data[loc.offset + len(content) // 2] ^= 0x01
    store.objects.put(key, encode(bytes(data)))


@pytest.mark.parametrize("how", ["flip", "delete"])
@pytest.mark.parametrize(
    "where", ["workspace/zz/late.txt", "workspace/models/m1.bin"], ids=["late-tar", "large-file"]
)
def test_a_damaged_blob_of_a_later_part_says_the_sandbox_is_dirty(
    tmp_path: Path, store: LoggingStore, log: Log, where: str, how: str
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    populate(sbx)
    ref = snap(sbx, store)
    _damage(store, ref, sbx, where, how)
    dst = new_sandbox(tmp_path, "dst")
    with pytest.raises(SnapshotError) as err:
        restore(store, log, dst, ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert err.value.context["sandbox_dirty"] is True
    assert err.value.context["part"] > 0
    assert "discard" in err.value.message
    assert log.count("unpack") > 0


@pytest.mark.parametrize("how", ["flip", "delete"])
def test_a_damaged_blob_of_the_first_part_leaves_the_sandbox_untouched(
    tmp_path: Path, store: LoggingStore, log: Log, how: str
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    populate(sbx)
    ref = snap(sbx, store)
    _damage(store, ref, sbx, "home/sandbox/.bashrc", how)  # the first file in path order
    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/keep.txt", b"still here")
    before = tree(dst)
    with pytest.raises(SnapshotError) as err:
        restore(store, log, dst, ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert "sandbox_dirty" not in err.value.context
    assert log.count("unpack") == 0 and log.count("write_range") == 0
    assert tree(dst) == before


def test_a_store_lost_between_parts_says_the_sandbox_is_dirty(
    tmp_path: Path, store: LoggingStore, log: Log
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    populate(sbx)
    ref = snap(sbx, store)
    store.fail_after = len(ref.manifest.blobs) // 2
    with pytest.raises(InfrastructureError) as err:
        restore(store, log, new_sandbox(tmp_path, "dst"), ref)
    assert err.value.code == ErrorCode.STORE_UNAVAILABLE
    assert err.value.context["sandbox_dirty"] is True
    assert err.value.retryable


# ---- memory -------------------------------------------------------------------------------


def _peak_bytes(store: LoggingStore, dst: Path, ref: SnapshotRef) -> int:
    """The most bytes (Python allocations: blobs, contents, tars, the backend's
    copies) held at once by a restore, beyond its loaded manifest."""
    tracemalloc.start()
    try:
        restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
        return tracemalloc.get_traced_memory()[1] - store.loaded
    finally:
        tracemalloc.stop()


def test_a_restore_in_parts_holds_a_bounded_number_of_bytes(
    tmp_path: Path, store: LoggingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    populate(sbx, scale=6)
    ref = snap(sbx, store)
    largest = max(e.size for e in ref.manifest.files())
    in_flight = THREADS * 2 * max(PACK, 40 * KIB)  # a pack or a mid-sized file, stored and decoded
    # a part's content and the tar made of it, and the blobs in flight; or one
    # large file, stored and inflated (zlib's growing buffer doubles it for a
    # moment); and some bookkeeping (the modes tar, the layout)
    bound = 2 * TAR + in_flight + 3 * largest + 64 * KIB
    total = ref.manifest.total_bytes
    assert total > 5 * bound

    streamed = _peak_bytes(store, new_sandbox(tmp_path, "streamed"), ref)
    monkeypatch.setattr(sync_mod, "STREAM_RESTORE_BYTES", 1 << 30)
    whole = _peak_bytes(store, new_sandbox(tmp_path, "whole"), ref)
    print(f"workspace {total} B: one pass held {whole} B, in parts {streamed} B (bound {bound})")
    assert whole > total  # what the measure sees: one pass holds every blob and every tar
    assert streamed < bound
