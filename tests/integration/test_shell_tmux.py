"""``sandgrid shell`` used the way a person uses it: in a terminal (tmux), typing.

Starts the grid of ``tests.support.grid_fixtures`` (API, Celery, two workers),
opens ``sandgrid shell SESSION`` in a detached tmux pane, types ``python3`` and
``print(6*7)`` with ``tmux send-keys``, and reads 42 back from the pane.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from sandgrid.client import Client
from sandgrid.errors import Conflict
from tests.support.grid_fixtures import SANDGRID, TOKEN, BatchGrid, batch_grid  # noqa: F401

pytestmark = pytest.mark.integration

WAIT_S = 60.0


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def _wait_pane(target: str, needle: str, timeout: float = WAIT_S) -> str:
    """The pane's text once ``needle`` is in it; fails after ``timeout`` (bounded wait)."""
    end, text = time.monotonic() + timeout, ""
    while time.monotonic() < end:
        text = _tmux("capture-pane", "-p", "-t", target)
        if needle in text:
            return text
        time.sleep(0.2)
    pytest.fail(f"{needle!r} never appeared in the pane:\n{text}")


def close_when_free(client: Client, session_id: str, timeout: float = WAIT_S) -> None:
    """Close a session once its terminal turn has let go (it saves the workspace first)."""
    end = time.monotonic() + timeout
    while True:
        try:
            client.close_session(session_id)
            return
        except Conflict:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


@pytest.fixture
def pane(batch_grid: BatchGrid) -> Iterator[tuple[str, str]]:  # noqa: F811
    """A tmux session running ``sandgrid shell`` on a new grid session; (target, session id)."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (apt-get install tmux)")
    client = Client(batch_grid.api_url, TOKEN)
    info = client.create_session(type="python")
    target = f"sg-shell-{uuid.uuid4().hex[:8]}"
    env = " ".join(
        f"{k}={shlex.quote(v)}" for k, v in batch_grid.env.items() if k.startswith("SANDGRID_")
    )
    cmd = f"env {env} {shlex.join([*SANDGRID, 'shell', info.id])}; sleep 30"
    _tmux("new-session", "-d", "-s", target, "-x", "120", "-y", "40", cmd)
    try:
        yield target, info.id
    finally:
        subprocess.run(["tmux", "kill-session", "-t", target], capture_output=True)
        close_when_free(client, info.id)
        client.close()


def test_shell_python_in_tmux(pane: tuple[str, str]) -> None:
    target, _ = pane
    _wait_pane(target, "/workspace$")
    _tmux("send-keys", "-t", target, "python3", "Enter")
    _wait_pane(target, ">>>")
    _tmux("send-keys", "-t", target, "print(6*7)", "Enter")
    text = _wait_pane(target, "42")
    assert "\n42" in text
    _tmux("send-keys", "-t", target, "exit()", "Enter")
    _tmux("send-keys", "-t", target, "stty size; exit 5", "Enter")
    text = _wait_pane(target, "logout")
    assert "40 120" in text  # the pane's size reached the remote pty
