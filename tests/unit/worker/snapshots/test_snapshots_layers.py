"""``worker.snapshots`` imports one way: the contracts in .importlinter-snapshots hold.

Layers, bottom up: ``format`` (pure), ``objects``, ``pointer``/``known``, ``refs``,
``catalog``, ``transfer``, ``saving``/``lifecycle``, ``store``/``sandbox``,
``workspace``. A cycle between any two modules breaks a layer, so this also
proves the package acyclic.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
CONFIG = ROOT / ".importlinter-snapshots"


def test_the_snapshot_modules_import_one_way() -> None:
    pytest.importorskip("importlinter")
    lint = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [str(lint), str(CONFIG)], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout
