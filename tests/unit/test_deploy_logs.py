"""The local bring-up's log files are 0640 in a 0750 directory (deploy/local/lib.sh).

``grid.sh`` starts the API, the workers and Flower with ``start_bg``, which
appends each one's output to ``$SG_LOG/NAME.log``; those lines name tenants,
sessions and the grid's addresses, so no other local user may read them: a
new file is made under umask 027, an existing world-readable one (from before
this rule) is tightened, and the process itself keeps its own umask.
"""

from __future__ import annotations

import stat
import subprocess
import time
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "deploy" / "local" / "lib.sh"


def _bash(state: Path, script: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "SANDGRID_STATE_DIR": str(state), "HOME": str(state)}
    subprocess.run(
        ["bash", "-c", f'umask 022; source "{LIB}"; {script}'], env=env, check=True, timeout=30
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _wait_for(path: Path, text: str) -> None:
    deadline = time.monotonic() + 10
    while not path.exists() or text not in path.read_text():
        assert time.monotonic() < deadline, f"{path}: {text!r} never written"
        time.sleep(0.05)


def test_start_bg_writes_its_log_0640_in_a_0750_directory(tmp_path: Path) -> None:
    umask = tmp_path / "umask.txt"
    _bash(tmp_path, f"start_bg fresh sh -c 'echo started; umask > {umask}'")
    log = tmp_path / "log" / "fresh.log"
    _wait_for(log, "started")
    assert _mode(log) == 0o640
    assert _mode(tmp_path / "log") == 0o750
    _wait_for(umask, "0022")  # the process keeps the caller's umask


def test_an_existing_world_readable_log_is_tightened(tmp_path: Path) -> None:
    old = tmp_path / "log" / "old.log"
    old.parent.mkdir(parents=True)
    old.write_text("from before\n")
    old.chmod(0o644)
    tmp_path.joinpath("log").chmod(0o755)
    _bash(tmp_path, "start_bg old sh -c 'echo again'")
    _wait_for(old, "again")
    assert _mode(old) == 0o640 and old.read_text().startswith("from before")
    assert _mode(tmp_path / "log") == 0o750
