"""Reading a sandbox's files from the host: only regular files beneath a root, of the
scanned size, through a PID that still belongs to the container.

A fake procfs stands for ``/proc``: ``<pid>/root`` is a directory holding the
sandbox's roots and ``<pid>/cgroup`` names the container; the PID is a live
child of the test, so the pidfd checks are the real ones.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.runtimes.hostfiles import read_beneath

CONTAINER = "c0ffee" * 10
ROOTS = ("/workspace", "/home/sandbox")


@pytest.fixture
def child() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "30"])
    yield proc.pid
    proc.kill()
    proc.wait()


def fake_proc(tmp_path: Path, pid: int, cgroup: str = f"0::/docker/{CONTAINER}\n") -> Path:
    proc = tmp_path / "proc"
    for root in ROOTS:
        (proc / str(pid) / "root" / root.lstrip("/")).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(cgroup)
    return proc


def workspace(proc: Path, pid: int) -> Path:
    return proc / str(pid) / "root" / "workspace"


def read(proc: Path, pid: int, *files: tuple[str, int]) -> dict[str, bytes]:
    return read_beneath(pid, CONTAINER, list(files), ROOTS, proc=proc)


def test_regular_files_of_the_scanned_size_are_read_under_each_root(
    tmp_path: Path, child: int
) -> None:
    proc = fake_proc(tmp_path, child)
    (workspace(proc, child) / "d").mkdir()
    (workspace(proc, child) / "d" / "big.bin").write_bytes(b"x" * 300_000)
    (proc / str(child) / "root" / "home" / "sandbox" / "n.txt").write_bytes(b"note")
    (workspace(proc, child) / "empty").write_bytes(b"")
    got = read(
        proc,
        child,
        ("/workspace/d/big.bin", 300_000),
        ("/home/sandbox/n.txt", 4),
        ("/workspace/empty", 0),
    )
    assert got == {
        "/workspace/d/big.bin": b"x" * 300_000,
        "/home/sandbox/n.txt": b"note",
        "/workspace/empty": b"",
    }


def test_a_file_of_another_size_or_missing_is_left_out(tmp_path: Path, child: int) -> None:
    proc = fake_proc(tmp_path, child)
    (workspace(proc, child) / "a").write_bytes(b"grown since the scan")
    assert read(proc, child, ("/workspace/a", 5), ("/workspace/gone", 3)) == {}


def test_no_symlink_is_followed_at_any_point_of_the_path(tmp_path: Path, child: int) -> None:
    proc = fake_proc(tmp_path, child)
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"host")
    ws = workspace(proc, child)
    (ws / "inside").write_bytes(b"tenant")
    (ws / "to-host").symlink_to(secret)
    (ws / "to-inside").symlink_to("inside")
    (ws / "dir-link").symlink_to(tmp_path)
    got = read(
        proc,
        child,
        ("/workspace/to-host", 4),
        ("/workspace/to-inside", 6),
        ("/workspace/dir-link/host-secret", 4),
        ("/workspace/../../../host-secret", 4),
    )
    assert got == {}


def test_a_path_outside_the_roots_is_never_opened(tmp_path: Path, child: int) -> None:
    proc = fake_proc(tmp_path, child)
    (proc / str(child) / "root" / "etc").mkdir()
    (proc / str(child) / "root" / "etc" / "passwd").write_bytes(b"root")
    (workspace(proc, child) / "x").write_bytes(b"root")
    got = read(proc, child, ("/etc/passwd", 4), ("/workspacex/x", 4), ("workspace/x", 4))
    assert got == {}


def test_a_fifo_or_a_directory_is_left_out_without_waiting(tmp_path: Path, child: int) -> None:
    proc = fake_proc(tmp_path, child)
    os.mkfifo(workspace(proc, child) / "pipe")
    (workspace(proc, child) / "dir").mkdir()
    result: list[dict[str, bytes]] = []
    reader = threading.Thread(
        target=lambda: result.append(
            read(proc, child, ("/workspace/pipe", 0), ("/workspace/dir", 0))
        )
    )
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive(), "opening a FIFO blocked"
    assert result == [{}]


def test_a_pid_that_is_not_the_containers_reads_nothing(tmp_path: Path, child: int) -> None:
    proc = fake_proc(tmp_path, child, cgroup="0::/user.slice\n")
    (workspace(proc, child) / "a").write_bytes(b"abc")
    assert read(proc, child, ("/workspace/a", 3)) == {}


def test_a_dead_pid_or_none_reads_nothing(tmp_path: Path) -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    proc = fake_proc(tmp_path, done.pid)
    (workspace(proc, done.pid) / "a").write_bytes(b"abc")
    assert read(proc, done.pid, ("/workspace/a", 3)) == {}
    assert read_beneath(0, CONTAINER, [("/workspace/a", 3)], ROOTS, proc=proc) == {}
    assert read_beneath(done.pid, "", [("/workspace/a", 3)], ROOTS, proc=proc) == {}
