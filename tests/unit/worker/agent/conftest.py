"""Fixtures of the agent's scan tests (``test_scan.py``, ``test_scan_inline.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from worker.agent import limits
from worker.agent import scan as scan_module
from worker.agent.scanstate import ScanState


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The agent's scan module (fresh scan state) whose roots are under ``tmp_path``."""
    for name in ("workspace", "home"):
        (tmp_path / name).mkdir()
    roots = (str(tmp_path / "workspace"), str(tmp_path / "home"))
    monkeypatch.setattr(limits, "ROOTS", roots)
    monkeypatch.setattr(scan_module, "SCANNED", ScanState())
    monkeypatch.setattr(scan_module, "HASHES", {})
    # as root it would act as the user: here the function runs as the test does
    monkeypatch.setattr(scan_module, "as_user_files", lambda fn, *a: json.loads(json.dumps(fn(*a))))
    return scan_module


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A small tree: files, a read-only file, a dir, a symlink, a fifo."""
    ws = tmp_path / "workspace"
    (ws / "d" / "e").mkdir(parents=True)
    (ws / "a.txt").write_text("a\n")
    (ws / "d" / "b.txt").write_text("b\n")
    (ws / "d" / "e" / "c.txt").write_text("c\n")
    (ws / "ro.txt").write_text("ro\n")
    (ws / "ro.txt").chmod(0o400)
    (ws / "link").symlink_to("d/b.txt")
    os.mkfifo(ws / "fifo")
    (tmp_path / "home" / ".rc").write_text("h\n")
    for p in (ws / "d", ws / "d" / "e"):
        p.chmod(0o755)
    for p in (ws / "a.txt", ws / "d" / "b.txt", ws / "d" / "e" / "c.txt", tmp_path / "home/.rc"):
        p.chmod(0o644)
    return ws
