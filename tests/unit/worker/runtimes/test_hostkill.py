"""The host-side kill signals a PID only while it belongs to the container."""

from __future__ import annotations

import subprocess
from pathlib import Path

from worker.runtimes.hostkill import kill_top_process

CONTAINER = "c0ffee" * 10


def fake_proc(tmp_path: Path, pid: int, cgroup: str) -> Path:
    (tmp_path / str(pid)).mkdir()
    (tmp_path / str(pid) / "cgroup").write_text(cgroup)
    return tmp_path


def test_a_process_in_the_containers_cgroup_is_killed(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "30"])
    proc = fake_proc(tmp_path, child.pid, f"0::/docker/{CONTAINER}\n")
    assert kill_top_process(child.pid, CONTAINER, proc=proc)
    assert child.wait(timeout=5) == -9


def test_a_pid_now_elsewhere_is_left_alone(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        proc = fake_proc(tmp_path, child.pid, "0::/user.slice\n")
        assert not kill_top_process(child.pid, CONTAINER, proc=proc)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_no_pid_or_a_dead_one_sends_nothing(tmp_path: Path) -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert not kill_top_process(None, CONTAINER, proc=tmp_path)
    assert not kill_top_process(0, CONTAINER, proc=tmp_path)
    assert not kill_top_process(child.pid, CONTAINER, proc=tmp_path)
