"""Files too large for one frame travel in chunks (``read_range``, ``write_range``).

End to end over ``HostDirBackend`` with a small threshold, so the tests stay
fast: the file survives snapshot and restore with its mode, never goes through
``pack`` or a restore tar, a change while it is read is caught (and scanned
again), and a chunk is never written through a symlink or outside the roots.
The agent's own two operations are checked the same way on a temporary
directory.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, SnapshotError
from sandgrid.wire.objects import keys as store_keys
from tests.support.hostdir import HostDirBackend
from tests.support.sandbox_trees import ROOTS, new_sandbox, tree, write
from tests.support.snapshot_stores import local_store
from worker.agent import limits, transfer
from worker.snapshots import SnapshotStore, WorkspaceChanged, restore_sandbox, snapshot_sandbox
from worker.snapshots import sync as sync_mod
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.entries import Entry
from worker.snapshots.format.restoretars import plan_restore
from worker.snapshots.sandbox import FileRange

TENANT = "acme"
LARGE = 64 << 10
CHUNK = 16 << 10


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_mod, "LARGE_FILE_BYTES", LARGE)
    monkeypatch.setattr(sync_mod, "CHUNK_BYTES", CHUNK)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SnapshotStore]:
    s = local_store(tmp_path / "store", small_file_bytes=16 << 10)
    yield s
    s.close()


class Recorder(HostDirBackend):
    """The host-directory backend, recording every call in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def pack(self, sbx: Path, paths: list[str]) -> bytes:
        self.calls.append(("pack", list(paths)))
        return super().pack(sbx, paths)

    def unpack(self, sbx: Path, data: bytes, roots: list[str], clear: bool) -> int:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            self.calls.append(("unpack", {"/" + m.name: m.size for m in tar.getmembers()}))
        return super().unpack(sbx, data, roots, clear)

    def read_range(self, sbx: Path, path: str, offset: int, length: int) -> FileRange:
        self.calls.append(("read_range", (path, offset, length)))
        return super().read_range(sbx, path, offset, length)

    def write_range(
        self,
        sbx: Path,
        path: str,
        offset: int,
        data: bytes | memoryview,
        roots: list[str],
        **kw: Any,
    ) -> int:
        self.calls.append(("write_range", (path, offset, len(data), kw["final"])))
        return super().write_range(sbx, path, offset, data, roots, **kw)

    def ops(self, name: str) -> list[Any]:
        return [arg for op, arg in self.calls if op == name]


# ---- round trip -----------------------------------------------------------------------


def test_a_large_file_survives_snapshot_and_restore_with_its_mode(
    tmp_path: Path, store: SnapshotStore
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    big = os.urandom(4 * CHUNK + 123)  # just over LARGE: 5 chunks, the last one short
    write(sbx, "workspace/data/model.bin", big, 0o640)
    write(sbx, "home/sandbox/.cache/weights", os.urandom(LARGE + 1), 0o600)
    write(sbx, "workspace/data/small.txt", b"small")
    write(sbx, "workspace/edge.bin", os.urandom(LARGE))  # at the threshold: still packed
    os.symlink("data/model.bin", sbx / "workspace/link")
    (sbx / "workspace/data").chmod(0o555)
    backend = Recorder()
    ref = snapshot_sandbox(backend, sbx, store, TENANT, "s1", None)
    assert ref is not None
    packed = {p for batch in backend.ops("pack") for p in batch}
    assert packed == {"/workspace/data/small.txt", "/workspace/edge.bin"}
    reads = backend.ops("read_range")
    assert [r for r in reads if r[0] == "/workspace/data/model.bin"] == [
        ("/workspace/data/model.bin", i * CHUNK, CHUNK if i < 4 else 123) for i in range(5)
    ]
    assert {r[0] for r in reads} == {"/workspace/data/model.bin", "/home/sandbox/.cache/weights"}

    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/data/model.bin", b"stale")
    backend = Recorder()
    restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert tree(dst) == tree(sbx)
    kinds = [op for op, _ in backend.calls]
    assert kinds == ["unpack", *["write_range"] * (5 + 5), "unpack"]  # directory modes last
    tarred = {p for op, members in backend.calls if op == "unpack" for p in members}
    assert "/workspace/data/model.bin" not in tarred and "/workspace/edge.bin" in tarred
    writes = [w for w in backend.ops("write_range") if w[0] == "/workspace/data/model.bin"]
    assert [(w[1], w[3]) for w in writes] == [(i * CHUNK, i == 4) for i in range(5)]


def test_the_plan_keeps_large_files_as_views_of_their_blobs() -> None:
    blob = memoryview(os.urandom(LARGE + 10))
    entries = [
        Entry("/workspace/d", "dir", 0o755, 0, None, None),
        Entry("/workspace/d/big", "file", 0o4755, len(blob), "0" * 64, None),
        Entry("/workspace/d/small", "file", 0o644, 1, "1" * 64, None),
    ]
    views = {"/workspace/d/big": blob, "/workspace/d/small": memoryview(b"x")}
    plan = plan_restore(entries, lambda e: views[e.path], mtime=0, large_bytes=LARGE)
    assert [(e.path, data) for e, data in plan.large] == [("/workspace/d/big", blob)]
    assert plan.large[0][1] is blob  # no copy
    assert len(plan.tars) == 1 and len(plan.modes) == 1
    with tarfile.open(fileobj=io.BytesIO(plan.tars[0])) as tar:
        assert {m.name: m.mode for m in tar.getmembers()} == {
            "workspace/d": 0o755 | 0o700,
            "workspace/d/small": 0o644,
        }
    with tarfile.open(fileobj=io.BytesIO(plan.modes[0])) as tar:
        assert {m.name: m.mode for m in tar.getmembers()} == {"workspace/d": 0o755}
    alone = plan_restore(entries, lambda e: views[e.path], mtime=0)
    assert alone.large == [] and alone.modes == []


def test_a_damaged_large_file_is_refused_before_the_sandbox_is_touched(
    tmp_path: Path, store: SnapshotStore
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    write(sbx, "workspace/big.bin", os.urandom(LARGE + 100))
    ref = snapshot_sandbox(HostDirBackend(), sbx, store, TENANT, "s1", None)
    assert ref is not None
    key = store_keys.blob_key(
        TENANT, hashlib.sha256((sbx / "workspace/big.bin").read_bytes()).hexdigest()
    )
    data = bytearray(decode(store.objects.get(key)))
    data[-1] ^= 0x01
    store.objects.put(key, encode(bytes(data)))
    dst = new_sandbox(tmp_path, "dst")
    write(dst, "workspace/keep", b"untouched")
    backend = Recorder()
    with pytest.raises(SnapshotError) as err:
        restore_sandbox(backend, dst, store, TENANT, "s1", ref)
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT
    assert backend.calls == []
    assert (dst / "workspace/keep").read_bytes() == b"untouched"


# ---- a file that changes while it is read ---------------------------------------------


class Changing(HostDirBackend):
    """Rewrites the large file (a new first byte and mtime; with ``grow``, 4 bytes
    more) just before it is read at ``at_offset``, the first ``times`` times."""

    def __init__(self, sbx: Path, at_offset: int, times: int, grow: bool = False) -> None:
        super().__init__()
        self.sbx, self.at_offset, self.left, self.grow = sbx, at_offset, times, grow

    def read_range(self, sbx: Path, path: str, offset: int, length: int) -> FileRange:
        if offset == self.at_offset and self.left:
            self.left -= 1
            target = self.sbx / "workspace/big.bin"
            data = bytearray(target.read_bytes())
            data[0] ^= 0xFF
            target.write_bytes(bytes(data) + (b"more" if self.grow else b""))
            os.utime(target, ns=(1, 10**18 + self.left))  # a new mtime, whatever the clock
        return super().read_range(sbx, path, offset, length)


@pytest.mark.parametrize(
    ("at_offset", "grow"),
    [(0, False), (CHUNK, False), (CHUNK, True)],
    ids=["before-the-first-chunk", "between-chunks", "grows-between-chunks"],
)
def test_a_file_changed_while_read_is_scanned_again(
    tmp_path: Path, store: SnapshotStore, at_offset: int, grow: bool
) -> None:
    sbx = new_sandbox(tmp_path, "src")
    write(sbx, "workspace/big.bin", os.urandom(LARGE + 100))
    ref = snapshot_sandbox(Changing(sbx, at_offset, 1, grow), sbx, store, TENANT, "s1", None)
    assert ref is not None and ref.stats["attempts"] == 2
    dst = new_sandbox(tmp_path, "dst")
    restore_sandbox(HostDirBackend(), dst, store, TENANT, "s1", ref)
    assert (dst / "workspace/big.bin").read_bytes() == (sbx / "workspace/big.bin").read_bytes()


def test_a_file_that_keeps_changing_is_refused(tmp_path: Path, store: SnapshotStore) -> None:
    sbx = new_sandbox(tmp_path, "src")
    write(sbx, "workspace/big.bin", os.urandom(LARGE + 100))
    with pytest.raises(WorkspaceChanged) as err:
        snapshot_sandbox(Changing(sbx, CHUNK, 2), sbx, store, TENANT, "s1", None)
    assert err.value.retryable and err.value.context == {"path": "/workspace/big.bin"}
    assert store.latest(TENANT, "s1") is None


# ---- write_range and read_range refuse ------------------------------------------------


@pytest.fixture
def sbx(tmp_path: Path) -> Path:
    box = new_sandbox(tmp_path, "box")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/secret").write_text("untouched")
    os.symlink(tmp_path / "outside", box / "workspace/out")
    os.symlink(tmp_path / "outside/secret", box / "workspace/to-secret")
    return box


@pytest.mark.parametrize(
    "path",
    [
        "/workspace/out/x",
        "/workspace/out/secret",
        "/etc/x",
        "/workspace",
        "/workspace/../etc/x",
        "workspace/x",
        "/workspace/to-secret/x",
    ],
)
def test_a_chunk_is_never_written_through_a_link_or_outside_the_roots(sbx: Path, path: str) -> None:
    for offset in (0, 4):
        with pytest.raises(InvalidInput):
            HostDirBackend().write_range(sbx, path, offset, b"pwned", ROOTS, mode=0o644, final=True)
    assert sorted(os.listdir(sbx.parent / "outside")) == ["secret"]
    assert (sbx.parent / "outside/secret").read_text() == "untouched"
    assert not (sbx / "etc").exists()


def test_a_link_where_the_file_goes_is_replaced_not_followed(sbx: Path) -> None:
    backend = HostDirBackend()
    with pytest.raises(InvalidInput, match="symbolic link"):  # a later chunk: it must be there
        backend.write_range(sbx, "/workspace/to-secret", 9, b"pwned", ROOTS, mode=0o644, final=True)
    path = "/workspace/to-secret"
    assert backend.write_range(sbx, path, 0, b"new", ROOTS, mode=0o640, final=False) == 3
    assert backend.write_range(sbx, path, 3, b"er", ROOTS, mode=0o640, final=True) == 5
    made = sbx / "workspace/to-secret"
    assert not made.is_symlink() and made.read_bytes() == b"newer"
    assert stat.S_IMODE(made.stat().st_mode) == 0o640
    assert (sbx.parent / "outside/secret").read_text() == "untouched"


def test_chunks_out_of_order_or_onto_a_directory_are_refused(sbx: Path) -> None:
    backend = HostDirBackend()
    backend.write_range(sbx, "/workspace/f", 0, b"abc", ROOTS, mode=0o644, final=False)
    with pytest.raises(InvalidInput, match="not 5"):
        backend.write_range(sbx, "/workspace/f", 5, b"x", ROOTS, mode=0o644, final=True)
    (sbx / "workspace/d").mkdir()
    with pytest.raises(InvalidInput, match="directory"):
        backend.write_range(sbx, "/workspace/d", 0, b"x", ROOTS, mode=0o644, final=True)


def test_read_range_reads_regular_files_only(sbx: Path) -> None:
    write(sbx, "workspace/f", b"0123456789")
    got = HostDirBackend().read_range(sbx, "/workspace/f", 3, 4)
    assert got.data == b"3456" and got.size == 10
    assert got.mtime_ns == (sbx / "workspace/f").stat().st_mtime_ns
    assert HostDirBackend().read_range(sbx, "/workspace/f", 8, 4).data == b"89"
    os.mkfifo(sbx / "workspace/fifo")
    for path in ("/workspace/to-secret", "/workspace/out/secret", "/workspace/fifo"):
        with pytest.raises(InvalidInput):
            HostDirBackend().read_range(sbx, path, 0, 4)


# ---- the agent's read_range and write_range -------------------------------------------


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return transfer


def test_agent_writes_chunks_and_reads_them_back(
    agent: ModuleType, sbx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    roots = (str(sbx / "workspace"),)
    monkeypatch.setattr(limits, "ROOTS", roots)
    target = str(sbx / "workspace/new/dir/big.bin")
    data = os.urandom(3000)
    for offset in range(0, 3000, 1000):
        final = offset == 2000
        chunk = data[offset : offset + 1000]
        mtime = 1_000_000.0 if final else None
        reply = agent.do_write_range(target, offset, chunk, roots, 0o4751, final, mtime)
        assert reply == {"size": offset + 1000}
    st = os.stat(target)
    assert (stat.S_IMODE(st.st_mode), st.st_mtime) == (0o751, 1_000_000.0)
    got = agent.do_read_range(target, 1000, 5000)  # raw bytes, in a binary frame
    assert got.fields == {"size": 3000, "mtime_ns": st.st_mtime_ns}
    assert got.data == data[1000:]


@pytest.mark.parametrize(
    ("rel", "offset", "why"),
    [
        ("workspace/out/x", 0, "not a directory"),
        ("workspace/to-secret/x", 0, "not a directory"),
        ("outside/x", 0, "not below"),
        ("workspace", 0, "not below"),
        ("workspace/a/../b", 0, "normalised"),
        ("workspace/to-secret", 4, None),
    ],
)
def test_agent_never_writes_a_chunk_through_a_link_or_outside_the_roots(
    agent: ModuleType, sbx: Path, rel: str, offset: int, why: str | None
) -> None:
    roots = (str(sbx / "workspace"),)
    path = str(sbx) + "/" + rel
    with pytest.raises((agent.AgentError, OSError)) as err:
        agent.do_write_range(path, offset, b"pwned", roots, 0o644, True, None)
    if why is not None:
        assert why in err.value.message
    assert sorted(os.listdir(sbx.parent / "outside")) == ["secret"]
    assert (sbx.parent / "outside/secret").read_text() == "untouched"


def test_agent_replaces_a_link_where_the_file_goes(agent: ModuleType, sbx: Path) -> None:
    roots = (str(sbx / "workspace"),)
    path = str(sbx / "workspace/to-secret")
    assert agent.do_write_range(path, 0, b"mine", roots, 0o600, True, None) == {"size": 4}
    assert not os.path.islink(path) and Path(path).read_bytes() == b"mine"
    assert (sbx.parent / "outside/secret").read_text() == "untouched"


def test_agent_reads_regular_files_under_the_roots_only(
    agent: ModuleType, sbx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "ROOTS", (str(sbx / "workspace"),))
    os.mkfifo(sbx / "workspace/fifo")
    write(sbx, "workspace/f", b"x")
    for rel in ("workspace/out/secret", "workspace/to-secret", "outside/secret", "workspace/fifo"):
        with pytest.raises((agent.AgentError, OSError)):
            agent.do_read_range(str(sbx) + "/" + rel, 0, 10)
    with pytest.raises(agent.AgentError, match="over"):
        agent.do_read_range(str(sbx / "workspace/f"), 0, limits.MAX_RAW_PAYLOAD + 1)
