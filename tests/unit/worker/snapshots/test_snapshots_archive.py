"""Tar reading and writing at the sandbox boundary, blob encoding, the host-directory backend."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, SnapshotError
from tests.support.hostdir import HostDirBackend
from worker.snapshots.format.archive import (
    TarError,
    WorkspaceChanged,
    gunzip_bounded,
    iter_tar,
    read_packed,
    tar_member,
)
from worker.snapshots.format.blobs import decode, encode, group_files
from worker.snapshots.format.entries import Entry
from worker.snapshots.format.manifest import Location
from worker.snapshots.format.restoretars import build_tars
from worker.snapshots.known import KnownBlobs

LONG = "workspace/" + "deep/" * 40 + "file.txt"
NAMES = ["workspace/a.txt", LONG, "workspace/" + "n" * 150, "workspace/é ü ☃.txt"]


def file_entry(path: str, data: bytes) -> Entry:
    return Entry(path, "file", 0o644, len(data), hashlib.sha256(data).hexdigest(), None)


def packed(members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """A tar.gz written by ``tarfile``, as the agent's ``pack`` writes it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1, format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# ---- our writer, read by tarfile; tarfile's writer, read by us ------------------------


def test_our_tars_read_back_with_tarfile() -> None:
    entries = [file_entry("/" + n, n.encode()) for n in NAMES]
    entries += [
        Entry("/workspace/d", "dir", 0o4755, 0, None, None),
        Entry("/workspace/l", "symlink", 0o777, 0, None, "/workspace/" + "t" * 200),
    ]
    (data,) = build_tars(entries, lambda e: e.path[1:].encode(), mtime=time.time())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        got = {m.name: m for m in tar.getmembers()}
        for n in NAMES:
            f = tar.extractfile(got[n])
            assert f is not None and f.read() == n.encode()
    assert got["workspace/d"].isdir() and got["workspace/d"].mode == 0o755  # no setuid
    assert got["workspace/l"].linkname == "/workspace/" + "t" * 200


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_tarfile_tars_read_with_our_reader(fmt: int) -> None:
    names = NAMES if fmt != tarfile.USTAR_FORMAT else NAMES[:2]
    raw = gunzip_bounded(packed([(n, n.encode() * 3) for n in names], fmt), 1 << 20)
    got = {m.name: bytes(m.data) for m in iter_tar(raw)}
    assert got == {n: n.encode() * 3 for n in names}


def test_big_restore_is_cut_into_tars_with_dir_modes_last() -> None:
    entries = [Entry("/workspace/ro", "dir", 0o555, 0, None, None)]
    entries += [file_entry(f"/workspace/ro/f{i}", b"z" * 3000) for i in range(10)]
    tars = build_tars(entries, lambda e: b"z" * 3000, mtime=0, max_bytes=8192)
    assert len(tars) > 3 and all(len(t) <= 8192 for t in tars[:-1])
    first = list(iter_tar(tars[0]))
    assert first[0].name == "workspace/ro" and first[0].mode == 0o755  # writable while filling
    last = list(iter_tar(tars[-1]))
    assert [(m.name, m.mode) for m in last] == [("workspace/ro", 0o555)]


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t[:100] + b"X" + t[101:],  # checksum
        lambda t: t[:700],  # truncated
        lambda t: t[:124] + b"\x80" + t[125:],  # base-256 size
    ],
)
def test_damaged_tars_are_refused(damage: object) -> None:
    good = tar_member("workspace/a", b"0", 0o644, 3) + b"abc" + bytes(509) + bytes(1024)
    assert callable(damage)
    with pytest.raises(TarError):
        list(iter_tar(damage(good)))


def test_global_pax_headers_are_refused() -> None:
    raw = tar_member("pax_global_header", b"g", 0o644, 0) + bytes(1024)
    with pytest.raises(TarError, match="global"):
        list(iter_tar(raw))


# ---- read_packed: the sandbox's archive is hostile input -------------------------------


def test_read_packed_returns_verified_contents_by_sha() -> None:
    a = file_entry("/workspace/a", b"alpha")
    data = packed([("workspace/a", b"alpha")])
    assert read_packed(data, {a.path: a}) == {a.sha256: b"alpha"}


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([("workspace/a", b"alpha"), ("etc/passwd", b"x")], "not asked for"),
        ([("workspace/a", b"alpha"), ("workspace/a", b"alpha")], "repeats"),
        ([("workspace/../workspace/a", b"alpha")], "not asked for"),
    ],
)
def test_read_packed_refuses_unexpected_members(members: list[tuple[str, bytes]], why: str) -> None:
    a = file_entry("/workspace/a", b"alpha")
    with pytest.raises(SnapshotError, match=why) as err:
        read_packed(packed(members), {a.path: a})
    assert err.value.code == ErrorCode.SNAPSHOT_FAILED


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE])
def test_read_packed_refuses_links_and_devices(kind: bytes) -> None:
    a = file_entry("/workspace/a", b"alpha")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("workspace/a")
        info.type, info.linkname = kind, "/etc/shadow"
        tar.addfile(info)
    with pytest.raises(SnapshotError, match="not a file"):
        read_packed(buf.getvalue(), {a.path: a})


def test_read_packed_refuses_a_decompression_bomb_quickly() -> None:
    a = file_entry("/workspace/a", b"alpha")
    bomb = gzip.compress(bytes(256 << 20), 1)  # 256 MiB of zeros in ~250 KiB
    t0 = time.perf_counter()
    with pytest.raises(SnapshotError, match="inflates"):
        read_packed(bomb, {a.path: a})
    assert time.perf_counter() - t0 < 2


def test_read_packed_notices_files_that_changed() -> None:
    a = file_entry("/workspace/a", b"alpha")
    with pytest.raises(WorkspaceChanged):
        read_packed(packed([("workspace/a", b"alphabet")]), {a.path: a})
    b = file_entry("/workspace/b", b"beta")
    with pytest.raises(WorkspaceChanged, match="lacks"):
        read_packed(packed([("workspace/a", b"alpha")]), {a.path: a, b.path: b})


def test_gunzip_accepts_several_members_and_plain_tars() -> None:
    assert gunzip_bounded(gzip.compress(b"ab") + gzip.compress(b"cd"), 10) == b"abcd"
    assert gunzip_bounded(b"plain", 10) == b"plain"
    with pytest.raises(TarError):
        gunzip_bounded(gzip.compress(b"abcd")[:-12], 10)


# ---- blobs ---------------------------------------------------------------------------


def test_blob_encoding_compresses_what_compresses() -> None:
    text = b"def f(x):\n    return x\n" * 4000
    noise = os.urandom(100_000)
    assert encode(text)[:1] == b"Z" and len(encode(text)) < len(text) // 10
    assert encode(noise)[:1] == b"R"
    for data in (text, noise, b"", b"tiny"):
        assert bytes(decode(encode(data), size=len(data))) == data


@pytest.mark.parametrize(
    "stored",
    [b"Q" + b"abc", b"Z" + zlib.compress(b"abcdef")[:-3], b"Z" + zlib.compress(b"abc") + b"x"],
)
def test_bad_blobs_do_not_decode(stored: bytes) -> None:
    with pytest.raises(ValueError):
        decode(stored, size=6)


def test_decode_never_inflates_past_the_announced_size() -> None:
    with pytest.raises(ValueError, match="expected"):
        decode(encode(bytes(10 << 20)), size=1000)


def test_a_blob_inflates_in_place_not_at_twice_its_size() -> None:
    data = bytes(range(256)) * (96 << 12)  # 96 MiB that compresses well
    stored = encode(data)
    tracemalloc.start()
    try:
        out = decode(stored, size=len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out == data
    assert peak < len(data) + (24 << 20)  # the output and about a chunk, not 2x


def test_small_files_are_grouped_into_packs() -> None:
    small = [file_entry(f"/workspace/s{i}", b"x" * 100) for i in range(10)]
    big = file_entry("/workspace/big", b"y" * 5000)
    groups = group_files([*small, big], small=1000, pack_bytes=450)
    assert [big] in groups
    packs = [g for g in groups if g != [big]]
    assert sum(len(g) for g in packs) == 10 and all(len(g) <= 4 for g in packs)


def test_known_blobs_expire_and_are_bounded() -> None:
    known = KnownBlobs(fresh_s=10, max_entries=3)
    loc = Location("b" * 64, 0)
    known.put("t", "a" * 64, loc, 5, stamp=100.0)
    assert known.get("t", "a" * 64, now=105.0) is not None
    assert known.get("t", "a" * 64, now=111.0) is None
    assert known.get("other", "a" * 64, now=105.0) is None
    for i in range(5):
        known.put("t", str(i) * 64, loc, 5, stamp=100.0)
    assert known.get("t", "0" * 64, now=101.0) is None and known.get("t", "4" * 64, now=101.0)
    known.forget("t", [loc.blob])
    assert known.get("t", "4" * 64, now=101.0) is None


# ---- the host-directory backend refuses what the agent refuses -------------------------


def _sbx(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "home/sandbox").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize(
    "members",
    [
        [("../escape", b"0", "")],
        [("/workspace/abs", b"0", "")],
        [("etc/passwd", b"0", "")],
        [("workspace/dev", b"3", "")],
        [("workspace/hard", b"1", "workspace/a")],
        [("workspace/l", b"2", "../../etc"), ("workspace/l/passwd", b"0", "")],
        [("workspace/l/sub/x", b"0", ""), ("workspace/l", b"2", "/etc")],  # link comes later
        [("workspace/f", b"0", ""), ("workspace/f/x", b"0", "")],
        [("workspace", b"0", "")],
    ],
)
def test_hostdir_unpack_refuses_hostile_tars_and_changes_nothing(
    tmp_path: Path, members: list[tuple[str, bytes, str]]
) -> None:
    sbx = _sbx(tmp_path)
    (sbx / "workspace/keep").write_text("kept")
    raw = b"".join(tar_member(n, t, 0o644, 0, linkname=link) for n, t, link in members)
    with pytest.raises(InvalidInput):
        HostDirBackend().unpack(sbx, raw + bytes(1024), ["/workspace"], True)
    assert (sbx / "workspace/keep").read_text() == "kept"


def test_hostdir_unpack_never_writes_through_a_symlink(tmp_path: Path) -> None:
    sbx = _sbx(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    raw = tar_member("workspace/l", b"2", 0o777, linkname=".") + tar_member(
        "workspace/l/x", b"0", 0o644, 1
    )
    raw += b"x" + bytes(511) + bytes(1024)
    os.symlink(outside, sbx / "workspace/evil")
    with pytest.raises(InvalidInput, match="not a directory"):
        HostDirBackend().unpack(sbx, raw, ["/workspace"], True)
    assert list(outside.iterdir()) == []


def test_hostdir_scan_skips_fifos_and_caches_hashes(tmp_path: Path) -> None:
    sbx = _sbx(tmp_path)
    os.mkfifo(sbx / "workspace/fifo")
    (sbx / "workspace/a").write_bytes(b"abc")
    backend = HostDirBackend()
    first = backend.scan(sbx, ["/workspace"])
    assert [e[0] for e in first] == ["/workspace/a"]
    assert first[0][4] == hashlib.sha256(b"abc").hexdigest()
    again = backend.scan(sbx, ["/workspace"])
    assert again == first and again[0] is first[0]  # the row (and its hash) reused


def test_hostdir_scan_kept_between_scans_equals_a_fresh_one(tmp_path: Path) -> None:
    sbx = _sbx(tmp_path)
    ws = sbx / "workspace"
    (ws / "d").mkdir()
    for name in ("a", "d/b", "d/c"):
        (ws / name).write_bytes(name.encode())
    backend = HostDirBackend()
    backend.scan(sbx, ["/workspace"])
    st = (ws / "a").stat()
    (ws / "a").write_bytes(b"A")  # same size, same mtime: only ctime moves
    os.utime(ws / "a", ns=(st.st_atime_ns, st.st_mtime_ns))
    (ws / "d/b").unlink()
    (ws / "d/new").write_bytes(b"n")
    (ws / "e").mkdir()
    os.symlink("/etc", ws / "e/link")
    os.mkfifo(ws / "d/fifo")
    kept = backend.scan(sbx, ["/workspace"])
    assert kept == HostDirBackend().scan(sbx, ["/workspace"])
    assert [r[4] for r in kept if r[0] == "/workspace/a"] == [hashlib.sha256(b"A").hexdigest()]
    os.rename(ws / "d", ws / "moved")
    assert backend.scan(sbx, ["/workspace"]) == HostDirBackend().scan(sbx, ["/workspace"])


def test_the_agents_pack_is_a_plain_tar_and_reads_back_verified(tmp_path: Path) -> None:
    """The agent's pack is not compressed (the worker compresses what it stores); both a
    plain tar and a gzip one (an older agent's) read back to the verified bytes."""
    sbx = _sbx(tmp_path)
    data = os.urandom(256 << 10)
    (sbx / "workspace/big.bin").write_bytes(data)
    raw = HostDirBackend().pack(sbx, ["/workspace/big.bin"])
    assert raw[:2] != b"\x1f\x8b" and len(raw) >= len(data)  # a tar, as it is
    wanted = {"/workspace/big.bin": file_entry("/workspace/big.bin", data)}
    sha = hashlib.sha256(data).hexdigest()
    assert read_packed(raw, wanted) == {sha: data}
    assert read_packed(gzip.compress(raw, 1), wanted) == {sha: data}
