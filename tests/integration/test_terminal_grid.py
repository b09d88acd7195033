"""The terminal through the real grid: SDK -> WebSocket API -> Celery -> a worker -> the agent.

A grid of its own (API and one worker serving ``python`` on runc and
``python-gvisor`` on runsc), on the batch grid's port and Redis database (one
integration run at a time). Each test opens its own session; every session is
closed at the end (once its terminal turn has let go of it).

The adversarial tests (issue 23): a token in the URL is refused; a frame the
protocol does not expect (binary, not JSON, unknown type) closes the terminal
with its close code; and after any hang-up the session takes a new exec within
``FREE_S``, not after the terminal's ``max_s``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from sandgrid.client import Client, Session
from sandgrid.client._pty import pty_url
from sandgrid.errors import AuthError, Conflict, InvalidInput
from sandgrid.localgrid import LocalGrid
from sandgrid.terminal import CLOSE_BAD_MESSAGE, CLOSE_UNSUPPORTED_FRAME, bearer_subprotocol
from tests.integration.test_shell_tmux import WAIT_S, close_when_free
from tests.support.grid_fixtures import API_PORT, REDIS_URL, TOKEN, own_grid

pytestmark = pytest.mark.integration

NODE = "term-w1"
TYPES = "python,python-gvisor"
FREE_S = 10.0
"""A session whose terminal's client went away takes a new exec within this."""
_TYPES = (("python", "runc", ()), ("python-gvisor", "runsc", (pytest.mark.runsc,)))
RUNTIMES = [pytest.param(t, id=name, marks=marks) for t, name, marks in _TYPES]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    with own_grid(
        tmp_path_factory.mktemp("termgrid"),
        port=API_PORT,
        redis_url=REDIS_URL,
        tenants={"batch": TOKEN},
        nodes=[NODE],
        types=TYPES,
    ) as g:
        yield g


@pytest.fixture
def client(grid: LocalGrid) -> Iterator[Client]:
    with Client(grid.api_url, TOKEN) as c:
        yield c


@pytest.fixture(params=RUNTIMES)
def session(request: pytest.FixtureRequest, client: Client) -> Iterator[Session]:
    s = client.session(type=request.param)
    try:
        yield s
    finally:
        close_when_free(client, s.id)


def _exec_when_free(s: Session, shell: str, within: float = WAIT_S) -> str:
    end = time.monotonic() + within
    while True:
        try:
            result = s.exec(shell=shell)
        except Conflict:
            assert time.monotonic() < end, f"the session was still busy after {within}s"
            time.sleep(0.2)
            continue
        assert result.exit_code == 0, result  # a kill beside a closing terminal says so here
        return result.stdout


def _raw(grid: LocalGrid, s: Session, **params: object) -> ClientConnection:
    url = pty_url(grid.api_url, s.id, {"idle_s": 60, **params})
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return connect(url, additional_headers=headers, open_timeout=WAIT_S)


def _until_closed(ws: ClientConnection) -> tuple[list[dict[str, object]], int | None]:
    """Every frame until the server closes; (frames, close code)."""
    frames: list[dict[str, object]] = []
    try:
        while True:
            frames.append(json.loads(ws.recv(timeout=WAIT_S)))
    except ConnectionClosed as closed:
        return frames, closed.rcvd.code if closed.rcvd else None


def _prompt(ws: ClientConnection) -> None:
    seen, end = "", time.monotonic() + WAIT_S
    while "$ " not in seen and time.monotonic() < end:
        msg = json.loads(ws.recv(timeout=WAIT_S))
        seen += str(msg.get("data", ""))
    assert "$ " in seen, seen


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


def test_terminal_idle_limit(client: Client) -> None:
    with client.session(type="python") as s, s.pty(idle_s=1.5) as term:
        while term.recv(timeout=WAIT_S) is not None:
            pass
        assert term.reason == "idle" and term.exit_code is None
        term.close()
        _exec_when_free(s, "true")


def test_terminal_hang_up_frees_the_session_at_once(session: Session) -> None:
    term = session.pty()
    term.read_until("$ ", WAIT_S)
    term.send("sleep 1000\r")
    term.close()
    assert _exec_when_free(session, "echo free", within=FREE_S) == "free\n"


def test_terminal_dropped_connection_frees_the_session(grid: LocalGrid, session: Session) -> None:
    ws = _raw(grid, session)
    _prompt(ws)
    ws.socket.shutdown(socket.SHUT_RDWR)  # no close frame: the TCP connection just ends
    ws.socket.close()
    assert _exec_when_free(session, "echo free", within=FREE_S) == "free\n"


def test_terminal_binary_frame_closes_it(grid: LocalGrid, session: Session) -> None:
    with _raw(grid, session) as ws:
        _prompt(ws)
        ws.send(b"\x00\x01binary")
        frames, code = _until_closed(ws)
    assert code == CLOSE_UNSUPPORTED_FRAME
    errors = [f for f in frames if f["type"] == "error"]
    assert errors and errors[0]["error"]["context"]["field"] == "frame"  # type: ignore[index]
    assert _exec_when_free(session, "echo free", within=FREE_S) == "free\n"


@pytest.mark.parametrize(
    ("frame", "field"),
    [("not json", "frame"), ('{"type": "paste", "data": "x"}', "type"), ("[1]", "frame")],
)
def test_terminal_bad_message_closes_it(
    grid: LocalGrid, client: Client, frame: str, field: str
) -> None:
    with client.session(type="python") as s:
        with _raw(grid, s) as ws:
            _prompt(ws)
            ws.send(frame)
            frames, code = _until_closed(ws)
        assert code == CLOSE_BAD_MESSAGE
        errors = [f for f in frames if f["type"] == "error"]
        assert errors[0]["error"]["context"]["field"] == field  # type: ignore[index]
        assert _exec_when_free(s, "echo free", within=FREE_S) == "free\n"


def test_two_terminals_and_an_exec_at_once(client: Client) -> None:
    """Each terminal is one of the session's parallel turns (issue 20): two at once,
    and an exec beside them; each shell sees what the other wrote."""
    with client.session(type="python") as s, s.pty() as first:
        first.read_until("$ ", WAIT_S)
        with s.pty() as second:
            second.read_until("$ ", WAIT_S)
            first.send("echo from-first > both.txt\n")
            first.read_until("$ ", WAIT_S)
            second.send("cat both.txt\n")
            assert "from-first" in second.read_until("from-first", WAIT_S)
            assert s.exec(shell="cat both.txt").stdout == "from-first\n"
        first.close()
        _exec_when_free(s, "true")


def test_terminal_token_never_in_the_url(grid: LocalGrid, client: Client) -> None:
    with client.session(type="python") as s:
        bad = Client(grid.api_url, "tok-wrong-" + "x" * 24)
        with bad, bad.pty(s.id) as term, pytest.raises(AuthError):
            term.recv(timeout=WAIT_S)
        # a token in the query string is refused (URLs are logged), naming the rule
        url = pty_url(grid.api_url, s.id, {"token": TOKEN, "idle_s": 1})
        with connect(url, open_timeout=WAIT_S) as ws:
            frames, code = _until_closed(ws)
        assert code == 4401
        assert frames[0]["type"] == "error"
        assert frames[0]["error"]["context"]["rule"] == "never in the URL"  # type: ignore[index]
        # browsers: the token in the subprotocol; the server answers sandgrid.v1, not the token
        url = pty_url(grid.api_url, s.id, {"idle_s": 1})
        protocols = [bearer_subprotocol(TOKEN), "sandgrid.v1"]
        with connect(url, subprotocols=protocols, open_timeout=WAIT_S) as ws:  # type: ignore[arg-type]
            assert ws.subprotocol == "sandgrid.v1"
            frames, _code = _until_closed(ws)
        kinds = {f["type"] for f in frames}
        assert "exit" in kinds and "error" not in kinds
        _exec_when_free(s, "true")


def test_terminal_bad_parameter(client: Client) -> None:
    with client.session(type="python") as s:
        with s.pty(rows=0) as term, pytest.raises(InvalidInput) as err:
            term.recv(timeout=WAIT_S)
        assert err.value.context["field"] == "rows"
