"""The runtime contract, the workspace: files, tar transfers, and the snapshot's scan,
pack and unpack (the rest of the contract: ``test_backend_contract.py``).

Most tests share one sandbox per runtime (creating one is the slow part); the
tests that break or fill a sandbox make their own.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, NotFound
from sandgrid.models import FileWrite
from tests.support.sandbox_calls import run, tar_b64, tar_of
from tests.support.snapshot_stores import local_store
from worker.ops.files import delete, get_tar, list_files, put_tar, read_file, write_files
from worker.sandboxes import Sandbox, SandboxManager
from worker.sandboxes.files import SCAN_INLINE_BYTES
from worker.snapshots import restore_sandbox, snapshot_sandbox

pytestmark = pytest.mark.integration


# ---- files ---------------------------------------------------------------------


def test_file_roundtrip(backend: SandboxManager, shared: Sandbox) -> None:
    raw = bytes(range(256)) + b"\x10\x11"  # ctrl-p ctrl-q must not detach the attach stream
    n = write_files(backend,
        shared,
        [
            FileWrite(path="files/a.txt", content="héllo\n"),
            FileWrite(path="/workspace/files/b.bin", content=base64.b64encode(raw).decode(),
                      encoding="base64", mode=0o600),
        ],
    )  # fmt: skip
    assert n == 2
    a = read_file(backend, shared, "files/a.txt")
    assert (a.content, a.encoding, a.size) == ("héllo\n", "utf-8", 7)
    b = read_file(backend, shared, "files/b.bin")
    assert b.encoding == "base64" and base64.b64decode(b.content) == raw
    entries = {e.path: e for e in list_files(backend, shared, "files").entries}
    assert set(entries) == {"files/a.txt", "files/b.bin"}
    assert entries["files/b.bin"].mode == 0o600 and entries["files/b.bin"].size == len(raw)
    owner = run(backend, shared, argv=["stat", "-c", "%u:%g", "files/a.txt"]).stdout
    assert owner == "1000:1000\n"
    assert delete(backend, shared, "files", recursive=True) == 3
    assert "files" not in [e.path for e in list_files(backend, shared, ".").entries]


def test_file_errors(backend: SandboxManager, shared: Sandbox) -> None:
    with pytest.raises(NotFound):  # as over REST and MCP (issue 20.5)
        read_file(backend, shared, "does/not/exist")
    write_files(backend, shared, [FileWrite(path="big.txt", content="z" * 5000)])
    with pytest.raises(InvalidInput) as err:
        read_file(backend, shared, "big.txt", max_bytes=1000)
    assert err.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    write_files(backend, shared, [FileWrite(path="d/x", content="")])
    with pytest.raises(InvalidInput):
        delete(backend, shared, "d")  # not empty, not recursive
    with pytest.raises(InvalidInput):
        delete(backend, shared, ".", recursive=True)


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../etc/passwd"])
def test_paths_leaving_the_workspace(backend: SandboxManager, shared: Sandbox, path: str) -> None:
    with pytest.raises(InvalidInput) as err:
        read_file(backend, shared, path)
    assert err.value.code == ErrorCode.PATH_OUTSIDE_WORKSPACE and path in str(err.value)


def test_symlink_out_is_refused(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="ln -sfn /etc out; ln -sfn /etc/passwd pw; ln -sfn /tmp/x tmpx")
    for op in (
        lambda: read_file(backend, shared, "pw"),
        lambda: read_file(backend, shared, "out/passwd"),
        lambda: list_files(backend, shared, "out"),
        lambda: write_files(backend, shared, [FileWrite(path="tmpx", content="no")]),
        lambda: write_files(backend, shared, [FileWrite(path="out/new", content="no")]),
        lambda: get_tar(backend, shared, "out"),
        lambda: put_tar(backend, shared, "out", tar_b64({"f": b"no"})),
    ):
        with pytest.raises(InvalidInput) as err:
            op()
        assert err.value.code == ErrorCode.PATH_OUTSIDE_WORKSPACE
        assert "'pw'" in str(err.value) or "'out" in str(err.value) or "'tmpx'" in str(err.value)
    assert run(backend, shared, argv=["ls", "/tmp"]).stdout == ""
    assert delete(backend, shared, "out") == 1  # the link itself, not /etc
    assert run(backend, shared, argv=["test", "-d", "/etc"]).exit_code == 0


def test_tar_upload_download(backend: SandboxManager, shared: Sandbox) -> None:
    data = tar_b64({"t/a.txt": b"A", "t/sub/b.txt": b"B", "t/link": "->sub/b.txt"})
    assert put_tar(backend, shared, "up", data) == 3
    assert run(backend, shared, shell="cat up/t/a.txt up/t/link").stdout == "AB"
    downloaded = base64.b64decode(get_tar(backend, shared, "up/t"))
    with tarfile.open(fileobj=io.BytesIO(downloaded)) as tar:
        names = {m.name: m for m in tar.getmembers()}
        assert set(names) == {"a.txt", "sub", "sub/b.txt", "link"}
        assert names["link"].issym() and names["link"].linkname == "sub/b.txt"
        member = tar.extractfile("a.txt")
        assert member is not None and member.read() == b"A"


@pytest.mark.parametrize(
    "members",
    [
        {"/abs": b"x"},
        {"../up": b"x"},
        {"ok": b"x", "l": "->/tmp", "l/x": b"x"},
        {"ok": b"x", "l2/x": b"x", "l2": "->../../tmp"},
    ],
    ids=["absolute", "dotdot", "through-symlink", "through-later-symlink"],
)
def test_tar_upload_refuses_escapes(
    backend: SandboxManager, shared: Sandbox, members: dict[str, bytes | str]
) -> None:
    with pytest.raises(InvalidInput):
        put_tar(backend, shared, "refused", tar_b64(members))
    assert run(backend, shared, argv=["test", "-e", "refused/ok"]).exit_code == 1
    assert run(backend, shared, argv=["ls", "/tmp"]).stdout == ""


def test_tar_upload_keeps_links_to_anywhere_as_links(
    backend: SandboxManager, shared: Sandbox
) -> None:
    """A link's target is data; the file API still refuses to go through it."""
    put_tar(backend, shared, "links", tar_b64({"etc": "->/etc", "py": "->/usr/bin/python3"}))
    assert (
        run(backend, shared, shell="readlink links/etc links/py").stdout
        == "/etc\n/usr/bin/python3\n"
    )
    with pytest.raises(InvalidInput):
        read_file(backend, shared, "links/etc/passwd")


# ---- snapshots: scan, pack, unpack ------------------------------------------------


def test_scan_pack_unpack(backend: SandboxManager, sandbox_factory: Any) -> None:
    src = sandbox_factory()
    run(backend, src, shell="mkdir -p w/d && echo hi > w/d/f && chmod 640 w/d/f && ln -s d/f w/l "
        "&& echo h > /home/sandbox/.rc && mkfifo w/fifo")  # fmt: skip
    rows = backend.files.scan(src, ["/workspace", "/home/sandbox"])
    assert rows == sorted(rows) and all(type(r) is tuple and len(r) == 6 for r in rows)
    entries = {r[0]: r for r in rows}
    assert "/workspace/w/fifo" not in entries and "/workspace" not in entries
    sha = "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
    assert entries["/workspace/w/d/f"] == ("/workspace/w/d/f", "file", 0o640, 3, sha, None)
    assert entries["/workspace/w/l"][1:] == ("symlink", 0o777, 0, None, "d/f")
    assert entries["/workspace/w/d"][1:] == ("dir", 0o755, 0, None, None)
    assert backend.files.scan(src, ["/workspace", "/home/sandbox"]) == rows
    files = [p for p, e in entries.items() if e[1] == "file"]
    packed = backend.files.pack(src, files)
    assert packed[:2] != b"\x1f\x8b"  # a plain tar: the worker compresses what it stores
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:") as tar:
        assert sorted(tar.getnames()) == sorted(p.lstrip("/") for p in files)
    dst = sandbox_factory()
    run(backend, dst, shell="echo stale > old.txt")
    restore = tar_of(
        {"workspace/w/d/f": b"hi\n", "workspace/w/l": "->d/f", "home/sandbox/.rc": b"h\n"}
    )
    assert backend.files.unpack(dst, restore, ["/workspace", "/home/sandbox"], clear=True) == 3
    assert run(backend, dst, shell="cat w/l ~/.rc; ls").stdout == "hi\nh\nw\n"


def test_the_host_reads_a_runc_sandboxs_files_and_nothing_else(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    src = sandbox_factory()
    run(backend, src, shell="head -c 1000000 /dev/urandom > big.bin && echo s > secret "
        "&& chmod 000 secret && ln -s /etc/hostname host && ln -s big.bin inner && mkfifo fifo "
        "&& echo h > ~/.rc")  # fmt: skip
    rows = {r[0]: r for r in backend.files.scan(src, ["/workspace", "/home/sandbox"])}
    host_size = Path("/etc/hostname").stat().st_size
    asked = [
        ("/workspace/big.bin", 1_000_000),
        ("/workspace/secret", 2),
        ("/home/sandbox/.rc", 2),
        ("/workspace/host", host_size),  # a link out: its target is the host's file
        ("/workspace/inner", 1_000_000),  # a link in: still a link
        ("/workspace/fifo", 0),
        ("/workspace/big.bin/..", 0),
    ]
    got = backend.files.read_direct(src, asked)
    if backend.runtime != "runc":
        assert got == {}  # gVisor keeps its files in its sentry: the agent packs them
        return
    assert set(got) == {"/workspace/big.bin", "/workspace/secret", "/home/sandbox/.rc"}
    for path, data in got.items():
        assert hashlib.sha256(data).hexdigest() == rows[path][4]
    backend.destroy(src)
    assert backend.files.read_direct(src, asked[:1]) == {}  # its PID is gone


CHANGES = [
    # each round of changes is followed by a delta scan compared with a full one
    "mkdir -p a/b/c d e && for i in 1 2 3; do echo $i > a/f$i; echo $i > a/b/c/g$i; done "
    "&& echo x > e/x && ln -s a/f1 l1 && ln -s /etc l2 && echo s > secret && chmod 000 secret "
    "&& echo h > ~/.h",
    "echo 2x > a/f2 && echo more >> a/f3 && echo new > a/new && rm a/f1 && rm -r a/b "
    "&& rm -r e && ln -s /tmp e && rm l1 && mkdir l1 && chmod 700 d && chmod 600 a/new "
    "&& rm ~/.h && mkfifo fifo && echo s2 > secret.2 && chmod 000 secret.2",
    "rm -r d && echo d > d && rm e && mkdir -p e/deep/er && echo z > e/deep/er/z "
    "&& ln -sfn a/new l2 && rm fifo && chmod 644 secret",
]


def test_scan_deltas_equal_full_scans(
    backend: SandboxManager, sandbox_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every round of changes the delta-based scan is what a full scan
    returns; with no change, a second scan is the same list from an empty delta."""
    sbx = sandbox_factory()
    roots = ["/workspace", "/home/sandbox"]
    replies: list[dict[str, Any]] = []
    call = backend.call

    def spy(sbx_: Sandbox, op: str, fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
        reply = call(sbx_, op, fields, **kw)
        if op == "scan":
            replies.append(reply)
        return reply

    monkeypatch.setattr(backend, "call", spy)
    assert backend.files.scan(sbx, roots) == []
    for change in [*CHANGES, "restore"]:
        if change == "restore":  # a restore that replaces the whole tree
            data = tar_of({"workspace/r/f": b"restored\n", "workspace/r/l": "->f"})
            backend.files.unpack(sbx, data, roots, clear=True)
        else:
            assert run(backend, sbx, shell=change).exit_code == 0
        delta = backend.files.scan(sbx, roots)
        assert "changed" in replies[-1], "a delta was expected"
        sbx.scan_state = None
        full = backend.files.scan(sbx, roots)
        assert "entries" in replies[-1]
        assert delta == full and full == sorted(full) and len(full) > 0
        again = backend.files.scan(sbx, roots)
        assert (replies[-1]["changed"], replies[-1]["removed"]) == ([], [])
        assert again == full
    paths = {r[0]: r for r in full}
    assert set(paths) == {"/workspace/r", "/workspace/r/f", "/workspace/r/l"}
    assert paths["/workspace/r/l"][1:] == ("symlink", 0o777, 0, None, "f")


@pytest.mark.parametrize(
    "members",
    [
        {"/workspace/abs": b"x"},
        {"workspace/../etc/x": b"x"},
        {"workspace/l": "->/tmp", "workspace/l/x": b"x"},
        {"etc/x": b"x"},
        {"workspace/ok": b"x", "workspace/dev": "DEVICE"},
    ],
    ids=["absolute", "dotdot", "through-symlink", "outside-roots", "device"],
)
def test_unpack_refuses(backend: SandboxManager, shared: Sandbox, members: dict[str, Any]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, value in members.items():
            info = tarfile.TarInfo(name)
            if value == "DEVICE":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
                tar.addfile(info)
            elif isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value[2:]
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
    run(backend, shared, shell="echo keep > keep.txt")
    with pytest.raises(InvalidInput):
        backend.files.unpack(shared, buf.getvalue(), ["/workspace"], clear=True)
    assert run(backend, shared, shell="cat keep.txt; ls ok 2>&1").stdout.startswith("keep\n")


def test_scan_roots_validated(backend: SandboxManager, shared: Sandbox) -> None:
    with pytest.raises(InvalidInput):
        backend.files.scan(shared, ["/etc"])
    with pytest.raises(InvalidInput):
        backend.files.pack(shared, ["/etc/passwd"])


def spied_ops(backend: SandboxManager, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ops of every agent request ``backend`` makes from now on, in order."""
    ops: list[str] = []
    call = backend.call

    def spy(sbx_: Sandbox, op: str, fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
        ops.append(op)
        return call(sbx_, op, fields, **kw)

    monkeypatch.setattr(backend, "call", spy)
    return ops


def test_an_exec_asked_to_scan_after_it_saves_the_scan_round_trip(
    backend: SandboxManager, sandbox_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scan_after_exec``: the exec's reply carries the scan (a delta on the last
    one), the next ``scan`` of the same roots sends no request and equals a full
    scan; any other request in between drops it."""
    sbx = sandbox_factory()
    roots = ("/workspace", "/home/sandbox")
    assert backend.files.scan(sbx, list(roots)) == []
    ops = spied_ops(backend, monkeypatch)
    sbx.scan_after_exec = roots
    assert run(backend, sbx, shell="mkdir d && echo x > d/f && rm -f nothing").exit_code == 0
    rows = backend.files.scan(sbx, list(roots))
    assert ops == ["exec"]
    sbx.scan_state = None
    assert backend.files.scan(sbx, list(roots)) == rows and ops == ["exec", "scan"]
    assert {r[0] for r in rows} == {"/workspace/d", "/workspace/d/f"}
    sbx.scan_after_exec = roots
    run(backend, sbx, shell="echo y > g")
    read_file(backend, sbx, "g")  # a request between: the exec's scan is stale
    after = backend.files.scan(sbx, list(roots))
    assert ops[-1] == "scan" and "/workspace/g" in {r[0] for r in after}


def test_a_small_change_reaches_the_store_without_a_pack(
    backend: SandboxManager,
    sandbox_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The exec's scan carries the small file it read (``inline``, issue 22.2): the
    snapshot after it asks the sandbox nothing more, and restores byte for byte; a
    file past the scan's budget still comes by ``pack`` (under runc the host reads
    it: ``hostfiles``)."""
    sbx = sandbox_factory()
    roots = ("/workspace", "/home/sandbox")
    ops = spied_ops(backend, monkeypatch)
    with local_store(tmp_path / "store") as store:
        sbx.scan_after_exec = roots
        run(backend, sbx, shell="echo one >> log.txt")
        first = snapshot_sandbox(backend.files, sbx, store, "acme", "s1", None)
        assert first is not None and ops == ["exec"]
        sbx.scan_after_exec = roots
        run(backend, sbx, shell=f"echo two >> log.txt; head -c {SCAN_INLINE_BYTES + 1} "
            "/dev/zero > big.bin")  # fmt: skip
        second = snapshot_sandbox(backend.files, sbx, store, "acme", "s1", first.manifest)
        packed = [] if backend.runtime == "runc" else ["pack"]
        assert second is not None and ops == ["exec", "exec", *packed]
        dst = sandbox_factory()
        restore_sandbox(backend.files, dst, store, "acme", "s1", second)
    assert run(backend, dst, shell="cat log.txt; wc -c < big.bin").stdout == (
        f"one\ntwo\n{SCAN_INLINE_BYTES + 1}\n"
    )
