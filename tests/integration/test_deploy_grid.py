"""``deploy/local/grid.sh`` itself, run with a private state directory and ports.

It starts the scheduler and Flower exactly as ``make up`` does (no workers:
``SANDGRID_WORKERS`` is blank), beside the machine's own grid, and
``deploy/local/down.sh`` with the same private state stops what it started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import TEST_REDIS_URL
from tests.support.listeners import listen_addresses

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrivateGrid:
    state: Path
    api_port: int
    flower_port: int

    def pid(self, name: str) -> int:
        return int((self.state / "run" / f"{name}.pid").read_text())

    @property
    def flower_password(self) -> str:
        return (self.state / "flower-password").read_text().strip()


@pytest.fixture(scope="module")
def private_grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateGrid]:
    state = tmp_path_factory.mktemp("sgstate")
    (state / "tenants.json").write_text(json.dumps({"tenants": []}))
    grid = PrivateGrid(state, _free_port(), _free_port())
    env = {
        **os.environ,
        "SANDGRID_STATE_DIR": str(state),
        "SANDGRID_VENV": str(Path(sys.executable).parents[1]),
        "SANDGRID_REDIS_URL": TEST_REDIS_URL,
        "SANDGRID_API_PORT": str(grid.api_port),
        "SANDGRID_FLOWER_PORT": str(grid.flower_port),
        "SANDGRID_WORKERS": " ",  # none: only the scheduler and Flower
        "SANDGRID_WORKER_TYPES": "python",
        "PYTHONPATH": str(ROOT),
    }
    try:
        run = subprocess.run(
            [str(ROOT / "deploy/local/grid.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        yield grid
    finally:
        subprocess.run(
            [str(ROOT / "deploy/local/down.sh")], env=env, capture_output=True, timeout=60
        )


def test_flower_password_is_on_no_command_line(private_grid: PrivateGrid) -> None:
    """23.6: Flower's password is read from its 0600 file, not passed in argv
    (``ps``) nor in the initial environment; basic auth still guards every page."""
    password = private_grid.flower_password
    pid = private_grid.pid("flower")
    assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert password.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    assert (private_grid.state / "flower-password").stat().st_mode & 0o077 == 0
    url = f"http://127.0.0.1:{private_grid.flower_port}"
    for path in ("/api/workers", "/metrics"):
        assert httpx.get(url + path, timeout=10).status_code == 401
        assert httpx.get(url + path, auth=("admin", "wrong"), timeout=10).status_code == 401
    ok = httpx.get(url + "/metrics", auth=("admin", password), timeout=10)
    assert ok.status_code == 200 and "flower" in ok.text


def test_grid_listeners_bind_loopback(private_grid: PrivateGrid) -> None:
    """23.3: the API and Flower that grid.sh starts listen on 127.0.0.1 only."""
    assert listen_addresses(private_grid.api_port) == {"127.0.0.1"}
    assert listen_addresses(private_grid.flower_port) == {"127.0.0.1"}
