"""The runtime contract: what every registered runtime keeps, through ``SandboxManager``.

Run against each runtime of ``worker.runtimes.RUNTIMES`` (runc, runsc today; the
``backend`` fixture of ``conftest.py``); a new runtime passes it unchanged
(docs/architecture.md, "A new runtime").

Most tests share one sandbox per runtime (creating one is the slow part); the
tests that break or fill a sandbox make their own.
"""

from __future__ import annotations

import base64
import io
import tarfile
import threading
import time
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, NotFound, SandboxError, SandboxLost
from sandgrid.models import ExecRequest, FileWrite, Quotas
from worker.ops.exec import exec_command
from worker.ops.files import delete, get_tar, list_files, put_tar, read_file, write_files
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration


def run(backend: SandboxManager, sbx: Sandbox, **kw: Any) -> Any:
    return exec_command(backend, sbx, ExecRequest(**kw))


def tar_of(members: dict[str, bytes | str]) -> bytes:
    """A tar: bytes values are files, ``"->target"`` strings are symlinks."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, value in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(value, str):
                info.type, info.linkname = tarfile.SYMTYPE, value.removeprefix("->")
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
    return buf.getvalue()


def tar_b64(members: dict[str, bytes | str]) -> str:
    """``tar_of`` as a tar upload carries it: base64."""
    return base64.b64encode(tar_of(members)).decode()


# ---- exec ----------------------------------------------------------------------


def test_exec_argv_shell_python(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, argv=["echo", "a b", "c"])
    assert (r.exit_code, r.stdout, r.stderr) == (0, "a b c\n", "")
    r = run(backend, shared, shell="echo out; echo err >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n", "err\n")
    r = run(backend, shared, python="import sys; print(sys.version_info[:2]); sys.exit(3)")
    assert (r.exit_code, r.stdout) == (3, "(3, 11)\n")
    assert r.node == backend.node and r.duration_ms > 0 and not r.timed_out


def test_exec_large_python_source(backend: SandboxManager, shared: Sandbox) -> None:
    source = "x = 1\n" * 50_000 + "print(x + 1)\n"  # 300 kB: over one argv string's limit
    assert run(backend, shared, python=source).stdout == "2\n"


def test_exec_env_cwd_stdin(backend: SandboxManager, shared: Sandbox) -> None:
    write_files(backend, shared, [FileWrite(path="sub/dir/f.txt", content="x")])
    r = run(backend, shared, shell="echo $FOO $HOME; pwd; cat", env={"FOO": "bar"}, cwd="sub/dir",
            stdin="from stdin")  # fmt: skip
    assert r.stdout == "bar /home/sandbox\n/workspace/sub/dir\nfrom stdin"
    big = "y" * 300_000  # more than a pipe buffer: stdin is fed while output is read
    assert len(run(backend, shared, argv=["cat"], stdin=big).stdout) == 300_000


def test_exec_missing_command(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, argv=["no-such-command"])
    assert r.exit_code == 127 and "no-such-command" in r.stderr


def test_exec_cwd_outside_workspace(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="ln -sfn /etc /workspace/etc-link")
    with pytest.raises(InvalidInput) as err:
        run(backend, shared, argv=["pwd"], cwd="etc-link")
    assert err.value.code == ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_output_cap_and_truncation(backend: SandboxManager, shared: Sandbox) -> None:
    cap = shared.quotas.output_bytes
    r = run(backend, shared, shell=f"head -c {cap + 5000} /dev/zero | tr '\\0' a; echo e >&2")
    assert len(r.stdout) == cap and r.stdout_truncated and not r.stderr_truncated
    assert r.stderr == "e\n" and r.exit_code == 0


def test_streaming_chunks(backend: SandboxManager, shared: Sandbox) -> None:
    seen: list[tuple[str, str, float]] = []
    t0 = time.monotonic()
    r = exec_command(
        backend,
        shared,
        ExecRequest(shell="echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three"),
        on_chunk=lambda stream, text: seen.append((stream, text, time.monotonic() - t0)),
    )
    assert "".join(t for s, t, _ in seen if s == "stdout") == r.stdout == "one\nthree\n"
    assert "".join(t for s, t, _ in seen if s == "stderr") == "two\n"
    assert seen[0][2] < 0.25  # the first chunk came while the command still ran


def test_signal_reported(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="kill -TERM $$")
    assert r.exit_code is None and r.signal == 15 and not r.oom_killed


# ---- the deadline ----------------------------------------------------------------


def test_deadline_kills_everything(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="sleep 1000 > /dev/null 2>&1 &")  # earlier, not this exec's
    t0 = time.monotonic()
    r = run(backend, shared, shell="sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; sleep 1000",
            timeout_s=1)  # fmt: skip
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.exit_code is None and r.signal == 9
    assert 1.0 <= elapsed < 2.0
    ps = run(backend, shared, argv=["ps", "-eo", "pid,ppid,user,stat,args"]).stdout
    sleeps = [line for line in ps.splitlines() if "sleep 1000" in line]
    assert len(sleeps) == 1, ps  # only the one started before this exec
    run(backend, shared, shell="pkill -x sleep; true")


def test_background_process_survives_normal_exit(backend: SandboxManager, shared: Sandbox) -> None:
    t0 = time.monotonic()
    r = run(backend, shared, shell="sleep 30 & echo started")
    assert r.exit_code == 0 and r.stdout == "started\n" and time.monotonic() - t0 < 2
    assert "sleep 30" in run(backend, shared, argv=["ps", "-eo", "args"]).stdout
    run(backend, shared, shell="pkill -x sleep; true")


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


# ---- isolation and hardening -------------------------------------------------------


def test_user_cannot_touch_the_agent(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="kill -9 1; echo rc=$?")
    assert "rc=1" in r.stdout
    r = run(backend, shared, shell="echo x > /proc/1/fd/0; echo rc=$?; ls /proc/1/fd; echo rc=$?")
    assert r.stdout == "rc=2\nrc=2\n"
    r = run(
        backend,
        shared,
        python=(
            "import ctypes,os; libc=ctypes.CDLL(None,use_errno=True)\n"
            "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())"
        ),
    )  # fmt: skip  PTRACE_ATTACH
    assert r.stdout.startswith("-1 ")
    r = run(backend, shared, shell="echo x >> /opt/sandgrid/agent.py; echo rc=$?")
    assert "rc=1" in r.stdout or "rc=2" in r.stdout
    backend.ping(shared)


def test_hardening(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="id -u; id -g; id -G; grep CapEff /proc/self/status")
    assert r.stdout == "1000\n1000\n1000\nCapEff:\t0000000000000000\n"
    root = run(backend, shared, shell="grep '^[^ ]* / ' /proc/mounts").stdout.split()
    assert root[3].split(",")[0] == "ro"
    assert run(backend, shared, shell="touch /x || touch /usr/x").exit_code == 1
    r = run(backend, shared, argv=["python3", "-c", "import socket; print(socket.if_nameindex())"])
    assert r.stdout == "[(1, 'lo')]\n"
    r = run(backend, shared, shell="grep NoNewPrivs /proc/self/status")
    assert r.stdout.split() == ["NoNewPrivs:", "1"]
    info = backend.inspect(shared)
    assert info["running"] and info["runtime"] == backend.runtime
    assert (
        info["labels"]["sandgrid.worker"] == backend.node
        and info["labels"]["sandgrid.managed"] == "1"
    )


def test_no_user_namespaces(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="unshare -r true; echo rc=$?; unshare -U true; echo rc=$?")
    assert r.stdout == "rc=1\nrc=1\n" and "Operation not permitted" in r.stderr
    code = "import threading\nt = threading.Thread(target=print, args=('t',)); t.start(); t.join()"
    assert run(backend, shared, python=code).stdout == "t\n"  # clone3 refused with ENOSYS


def test_no_setuid_or_setgid_file(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="find / -xdev -perm /6000 -type f 2>/dev/null", timeout_s=20)
    assert r.stdout == ""


def test_lost_channel(backend: SandboxManager, sandbox_factory: Any, docker_client: Any) -> None:
    sbx = sandbox_factory()
    docker_client.api.kill(sbx.id)
    with pytest.raises(SandboxLost):
        backend.ping(sbx)
    assert sbx.state == "lost"
    with pytest.raises(SandboxError):
        run(backend, sbx, argv=["true"])


def test_concurrent_requests_are_serialised(backend: SandboxManager, shared: Sandbox) -> None:
    results: list[str] = []

    def worker(i: int) -> None:
        results.append(run(backend, shared, shell=f"echo {i}").stdout)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"{i}\n" for i in range(8))


def test_network_needs_permission(backend: SandboxManager) -> None:
    with pytest.raises(InvalidInput) as err:
        backend.create("python", Quotas(network=True))
    assert err.value.context["field"] == "quotas.network"


# ---- cancel (a notification on the channel while the exec runs) -------------------


def _cancel_when_started(sbx: Sandbox, started: threading.Event) -> None:
    """Wait for the exec's first chunk, then cancel the request in flight."""
    assert started.wait(30)
    assert sbx.channel is not None and sbx.channel.in_flight is not None
    [(frame_id, (op, _))] = sbx.channel.in_flight.items()
    assert op == "exec"
    sbx.channel.notify("cancel", {"target": frame_id})


def test_cancel_kills_every_process_of_the_exec(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="sleep 1000 > /dev/null 2>&1 &")  # earlier, not this exec's
    started = threading.Event()
    canceller = threading.Thread(target=_cancel_when_started, args=(shared, started))
    canceller.start()
    r = exec_command(
        backend,
        shared,
        ExecRequest(
            shell="sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; echo started; sleep 1000",
            timeout_s=60,
        ),
        on_chunk=lambda stream, text: started.set(),
    )
    canceller.join()
    assert r.cancelled and not r.timed_out and r.exit_code is None and r.signal == 9
    assert not r.oom_killed and r.stdout == "started\n"
    ps = run(backend, shared, argv=["ps", "-eo", "pid,ppid,user,stat,args"]).stdout
    sleeps = [line for line in ps.splitlines() if "sleep 1000" in line]
    assert len(sleeps) == 1, ps  # only the one started before this exec
    run(backend, shared, shell="pkill -x sleep; true")


def test_cancel_of_another_request_or_none_is_a_no_op(
    backend: SandboxManager, shared: Sandbox
) -> None:
    assert shared.channel is not None
    shared.channel.notify("cancel", {"target": 999_999})  # no exec runs: no reply either
    r = run(backend, shared, shell="echo still here")
    assert r.stdout == "still here\n" and not r.cancelled
    started = threading.Event()

    def wrong_target() -> None:
        assert started.wait(30) and shared.channel is not None
        shared.channel.notify("cancel", {"target": -1})

    t = threading.Thread(target=wrong_target)
    t.start()
    r = exec_command(
        backend,
        shared,
        ExecRequest(shell="echo a; sleep 0.5; echo b"),
        on_chunk=lambda stream, text: started.set(),
    )
    t.join()
    assert r.stdout == "a\nb\n" and r.exit_code == 0 and not r.cancelled


def test_an_exec_asked_to_scan_after_it_saves_the_scan_round_trip(
    backend: SandboxManager, sandbox_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scan_after_exec``: the exec's reply carries the scan (a delta on the last
    one), the next ``scan`` of the same roots sends no request and equals a full
    scan; any other request in between drops it."""
    sbx = sandbox_factory()
    roots = ("/workspace", "/home/sandbox")
    assert backend.files.scan(sbx, list(roots)) == []
    ops: list[str] = []
    call = backend.call

    def spy(sbx_: Sandbox, op: str, fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
        ops.append(op)
        return call(sbx_, op, fields, **kw)

    monkeypatch.setattr(backend, "call", spy)
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
