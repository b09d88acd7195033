"""The terminal through the real grid: SDK -> WebSocket API -> Celery -> a worker -> the agent.

The grid of ``tests.support.grid_fixtures`` (API, two workers). Each test
opens its own session; every session is closed at the end (once its terminal
turn has let go of it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from websockets.sync.client import connect

from sandgrid.client import Client, Session
from sandgrid.client._pty import pty_url
from sandgrid.errors import AuthError, Conflict, InvalidInput
from tests.integration.test_shell_tmux import WAIT_S, close_when_free
from tests.support.grid_fixtures import TOKEN, BatchGrid, batch_grid  # noqa: F401

pytestmark = pytest.mark.integration


@pytest.fixture
def client(batch_grid: BatchGrid) -> Iterator[Client]:  # noqa: F811
    with Client(batch_grid.api_url, TOKEN) as c:
        yield c


@pytest.fixture
def session(client: Client) -> Iterator[Session]:
    s = client.session(type="python")
    try:
        yield s
    finally:
        close_when_free(client, s.id)


def _exec_when_free(s: Session, shell: str) -> str:
    end = time.monotonic() + WAIT_S
    while True:
        try:
            return s.exec(shell=shell).stdout
        except Conflict:
            assert time.monotonic() < end
            time.sleep(0.2)


def test_terminal_through_the_grid(session: Session) -> None:
    with session.pty(rows=30, cols=100) as term:
        term.read_until("/workspace$", WAIT_S)
        term.send("echo $((6*7)) > answer.txt; stty size\r")
        assert "30 100" in term.read_until("30 100", WAIT_S)
        term.resize(50, 160)
        term.send("stty size\r")
        assert "50 160" in term.read_until("50 160", WAIT_S)
        term.send("exit 3\r")
        while term.recv(timeout=WAIT_S) is not None:
            pass
        assert (term.exit_code, term.reason) == (3, "exited")
    # the terminal was a turn of the session: its work is in the workspace
    assert _exec_when_free(session, "cat answer.txt") == "42\n"


def test_terminal_idle_limit(session: Session) -> None:
    with session.pty(idle_s=1.5) as term:
        while term.recv(timeout=WAIT_S) is not None:
            pass
        assert term.reason == "idle" and term.exit_code is None


def test_terminal_hang_up_frees_the_session(session: Session) -> None:
    term = session.pty()
    term.read_until("$ ", WAIT_S)
    term.close()
    assert _exec_when_free(session, "echo free") == "free\n"


def test_terminal_one_at_a_time(session: Session) -> None:
    with session.pty() as first:
        first.read_until("$ ", WAIT_S)
        with session.pty() as second, pytest.raises(Conflict) as err:
            second.recv(timeout=WAIT_S)
        assert err.value.code == "session_busy"


def test_terminal_needs_a_token(batch_grid: BatchGrid, session: Session) -> None:  # noqa: F811
    bad = Client(batch_grid.api_url, "tok-wrong-" + "x" * 24)
    with bad, bad.pty(session.id) as term, pytest.raises(AuthError):
        term.recv(timeout=WAIT_S)
    # a token in the query string, for clients that cannot set headers
    url = pty_url(batch_grid.api_url, session.id, {"token": TOKEN, "idle_s": 1})
    with connect(url, open_timeout=WAIT_S) as ws:
        kinds = set()
        while "exit" not in kinds:
            kinds.add(json.loads(ws.recv(timeout=WAIT_S))["type"])
        assert "error" not in kinds


def test_terminal_bad_input(batch_grid: BatchGrid, session: Session) -> None:  # noqa: F811
    with session.pty(rows=0) as term, pytest.raises(InvalidInput) as err:
        term.recv(timeout=WAIT_S)
    assert err.value.context["field"] == "rows"
    url = pty_url(batch_grid.api_url, session.id, {"idle_s": 5})
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with connect(url, additional_headers=headers, open_timeout=WAIT_S) as ws:
        ws.send(json.dumps({"type": "paste", "data": "x"}))
        msg = json.loads(ws.recv(timeout=WAIT_S))
        while msg["type"] == "stdout":
            msg = json.loads(ws.recv(timeout=WAIT_S))
        assert msg["type"] == "error" and msg["error"]["context"]["field"] == "type"
