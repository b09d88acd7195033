"""The port tests' grid (issue 21.1): its fixtures and the sandbox servers' start.

A grid of its own (API and two workers serving ``python`` on runc and
``python-gvisor`` on runsc), on the batch grid's port and Redis database (one
integration run at a time); each module that imports ``grid`` gets one. The caps
are small (``MAX_CONNECTIONS``, ``MAX_BYTES``) so that a test can show them holding.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandgrid.client import Client, Session
from sandgrid.localgrid import LocalGrid
from tests.integration.test_shell_tmux import close_when_free
from tests.integration.test_terminal_grid import RUNTIMES, TYPES
from tests.support.grid_fixtures import API_PORT, REDIS_URL, TOKEN, own_grid
from tests.support.port_servers import SERVERS

__all__ = [
    "BIG_MB",
    "MAX_BYTES",
    "MAX_CONNECTIONS",
    "NODES",
    "OTHER_TOKEN",
    "TOKEN",
    "TYPES",
    "client",
    "grid",
    "http_server",
    "serve",
    "session",
]

NODES = ["ports-w1", "ports-w2"]
OTHER_TOKEN = "tok-other-" + "e" * 24
MAX_CONNECTIONS = 6
MAX_BYTES = 80 << 20
BIG_MB = 50


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    with own_grid(
        tmp_path_factory.mktemp("portsgrid"),
        port=API_PORT,
        redis_url=REDIS_URL,
        tenants={"batch": TOKEN, "other": OTHER_TOKEN},
        nodes=NODES,
        types=TYPES,
        env={
            "SANDGRID_HEARTBEAT_S": "0.5",
            "SANDGRID_LEASE_TTL_S": "4",
            "SANDGRID_PORTS__MAX_CONNECTIONS": str(MAX_CONNECTIONS),
            "SANDGRID_PORTS__MAX_BYTES": str(MAX_BYTES),
        },
    ) as g:
        yield g


@pytest.fixture
def client(grid: LocalGrid) -> Iterator[Client]:
    """The tenant's client, with time for a 50 MB body."""
    with Client(grid.api_url, TOKEN, timeout=120) as c:
        yield c


@pytest.fixture(params=RUNTIMES)
def session(request: pytest.FixtureRequest, client: Client) -> Iterator[Session]:
    """A session of each runtime with the test servers' script in its workspace."""
    s = client.session(type=request.param)
    s.write_file("servers.py", SERVERS)
    yield s
    close_when_free(client, s.id)


def serve(s: Session, command: str, port: int) -> None:
    """Start ``command`` in the background in the sandbox; wait until ``port`` accepts."""
    s.exec(shell=command, background=True)
    probe = (
        "import socket,sys,time\n"
        "for _ in range(300):\n"
        "    try:\n"
        f"        socket.create_connection(('127.0.0.1', {port}), 1).close(); sys.exit(0)\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
        "sys.exit(1)\n"
    )
    assert s.exec(["python3", "-c", probe]).exit_code == 0, f"port {port} never accepted"


def http_server(s: Session, port: int = 8000) -> None:
    serve(s, f"cd /workspace && exec python3 -m http.server {port} --bind 127.0.0.1", port)
