"""``python -m sandgrid.cli batch --help`` works as the README shows it, in a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_batch_help_runs_and_lists_its_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sandgrid.cli", "batch", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Usage: python -m sandgrid.cli batch")
    for command in ("run", "status", "cancel"):
        assert f"\n  {command} " in out.stdout, out.stdout
