"""The memory guard: polls sooner near the limit, kills the biggest user process past it."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from worker.agent import memory
from worker.agent.memory import POLL_MAX_S, POLL_MIN_S, MemoryGuard, limit_memory


def guard(tmp_path: Path, usage: int, limit: int) -> MemoryGuard:
    (tmp_path / "usage").write_text(f"{usage}\n")
    g = MemoryGuard(str(tmp_path / "usage"))
    g.limit = limit
    return g


def test_poll_sooner_near_the_limit(tmp_path: Path) -> None:
    assert guard(tmp_path, 10 << 20, 512 << 20).check() == POLL_MAX_S
    assert guard(tmp_path, 511 << 20, 512 << 20).check() == POLL_MIN_S
    assert POLL_MIN_S < guard(tmp_path, 400 << 20, 512 << 20).check() < POLL_MAX_S
    assert MemoryGuard(str(tmp_path / "absent")).check() == POLL_MAX_S


def test_over_the_limit_kills_the_biggest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = subprocess.Popen(["sleep", "30"])
    monkeypatch.setattr(memory, "biggest_user_process", lambda: victim.pid)
    g = guard(tmp_path, 600 << 20, 512 << 20)
    assert g.check() == POLL_MIN_S and g.kills == 1
    assert victim.wait(5) == -signal.SIGKILL
    monkeypatch.setattr(memory, "biggest_user_process", lambda: None)
    assert g.check() == POLL_MIN_S and g.kills == 1  # nothing of the user's to kill


def test_limit_memory_only_where_the_cgroup_is_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []
    monkeypatch.setattr(memory.MEMORY, "start", started.append)
    monkeypatch.setenv("SANDGRID_MEMORY_MAX", str(256 << 20))
    limit_memory(str(tmp_path / "no" / "such" / "file"))  # read-only cgroupfs: the kernel holds it
    assert started == []
    limit_memory(str(tmp_path / "limit"))
    assert started == [256 << 20] and (tmp_path / "limit").read_text() == str(256 << 20)
