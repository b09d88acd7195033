"""Streams open at once, through a real grid (API + one worker + Redis): issue 23.7.

A grid of its own with a small threadpool (``SANDGRID_API_THREADS=8``) and a
cap of ``PER_SESSION`` streams per session. Tenant ``acme`` holds one long
streamed exec and re-attaches to it until the cap; the adversarial tests show
that the next stream (a re-attach or a streamed exec) is refused with 429
naming the limit, that the slots come back when the clients hang up, and that
meanwhile tenant ``globex`` is answered at once: an idle stream holds no thread,
so no number of them starves another tenant (before the fix, each idle stream
held a thread of the pool for each of its 1-second reads).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from sandgrid.client import Client, Session
from sandgrid.client._stream import TurnStream
from sandgrid.errors import LimitExceeded
from sandgrid.localgrid import LocalGrid
from tests.support.grid_fixtures import own_grid

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_STREAM_LIMITS_PORT", "8724"))
REDIS_URL = os.environ.get("SANDGRID_TEST_BATCH_REDIS_URL", "redis://127.0.0.1:6379/14")
TOKEN_A = "tok-acme0-" + "a" * 24
TOKEN_B = "tok-globx-" + "b" * 24
PER_SESSION = 40
"""Five times the API's threads: before the fix, this many idle streams starved the pool."""
ANSWER_S = 5.0
"""Another tenant's request answers within this while the streams are open (a generous
bound: it takes ~0.01 s; before the fix it took over 5 s)."""
RELEASE_S = 15.0


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    env = {
        "SANDGRID_API_THREADS": "8",
        "SANDGRID_STREAMS__PER_SESSION": str(PER_SESSION),
        "SANDGRID_STREAMS__PER_TENANT": str(PER_SESSION + 8),
    }
    with own_grid(
        tmp_path_factory.mktemp("streamlimits"),
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"acme": TOKEN_A, "globex": TOKEN_B},
        nodes=["limits-w1"],
        types="python",
        env=env,
    ) as g:
        yield g


@pytest.fixture
def long_turn(grid: LocalGrid) -> Iterator[tuple[Session, TurnStream]]:
    """A session of acme with a streamed exec that runs until cancelled (one stream open)."""
    with Client(grid.api_url, TOKEN_A) as c, c.session(type="python") as s:
        stream = s.exec_stream(shell="echo started; sleep 600", timeout_s=600)
        for event in stream:
            if event.type == "stdout":
                break
        try:
            yield s, stream
        finally:
            stream.cancel()
            stream.wait()


def _reattach(grid: LocalGrid, session_id: str, turn_id: str) -> tuple[socket.socket, int]:
    """A raw re-attach that never reads past the status line: (its socket, its status)."""
    sock = socket.create_connection(("127.0.0.1", PORT), timeout=60)
    sock.sendall(
        f"GET /v1/sessions/{session_id}/turns/{turn_id}/events HTTP/1.1\r\n"
        f"Host: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(256)
        assert chunk, "the API closed the connection"
        head += chunk
    return sock, int(head.split(b" ", 2)[1])


@contextmanager
def _up_to_the_cap(grid: LocalGrid, s: Session, turn_id: str) -> Iterator[None]:
    """Re-attach until the session's cap is reached; hang them all up after."""
    socks = []
    try:
        for _ in range(PER_SESSION - 1):  # the long turn's own stream holds one slot
            sock, status = _reattach(grid, s.id, turn_id)
            socks.append(sock)
            assert status == 200
        yield
    finally:
        for sock in socks:
            sock.close()


def test_another_tenant_is_answered_while_streams_are_open(
    grid: LocalGrid, long_turn: tuple[Session, TurnStream]
) -> None:
    s, stream = long_turn
    with _up_to_the_cap(grid, s, stream.turn_id):
        time.sleep(2)  # every stream is in its idle loop now
        headers = {"Authorization": f"Bearer {TOKEN_B}"}
        for _ in range(3):
            r = httpx.get(f"{grid.api_url}/v1/sessions", headers=headers, timeout=ANSWER_S)
            assert r.status_code == 200


def test_the_cap_refuses_with_429_then_frees_on_hang_up(
    grid: LocalGrid, long_turn: tuple[Session, TurnStream]
) -> None:
    s, stream = long_turn
    with _up_to_the_cap(grid, s, stream.turn_id):
        r = httpx.get(
            f"{grid.api_url}/v1/sessions/{s.id}/turns/{stream.turn_id}/events",
            headers={"Authorization": f"Bearer {TOKEN_A}"},
            timeout=30,
        )
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        error = r.json()["error"]
        assert error["context"]["limit"] == "streams_per_session"
        assert error["context"]["max"] == PER_SESSION and error["context"]["retry_after"] > 0
        with pytest.raises(LimitExceeded) as err:
            for _event in s.exec_stream(shell="echo no room"):
                pass
        assert err.value.context["limit"] == "streams_per_session"
    # the hung-up streams gave their slots back: a new re-attach is let in, soon
    end = time.monotonic() + RELEASE_S
    while True:
        sock, status = _reattach(grid, s.id, stream.turn_id)
        sock.close()
        if status == 200:
            break
        assert time.monotonic() < end, f"still {status} {RELEASE_S}s after the hang-ups"
        time.sleep(0.5)
