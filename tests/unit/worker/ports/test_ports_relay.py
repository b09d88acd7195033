"""The worker's side of exposed ports over real sockets: the agent's dialer, the caps.

The agent's dialing loop (``worker.agent.inbound``) runs in threads against a
Unix socket of a temporary directory, as it does against the bind-mounted one
in a sandbox; its loopback is the host's (a server on 127.0.0.1 here).
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgrid.errors import LimitExceeded, PortUnreachable, SandboxError
from worker.agent import inbound
from worker.ports.caps import PortCaps
from worker.ports.sockets import InboundSockets


@pytest.fixture
def sockets(tmp_path: Path) -> Iterator[tuple[InboundSockets, str]]:
    box = InboundSockets()
    box.open("sbx", tmp_path)
    path = str(tmp_path / "inbound.sock")
    for _ in range(2):
        threading.Thread(target=inbound._dial, args=(path,), daemon=True).start()
    yield box, path
    box.stop()


@pytest.fixture
def echo() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def run() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            while data := c.recv(65536):
                c.sendall(data.upper())
            c.close()

    threading.Thread(target=run, daemon=True).start()
    yield port
    srv.close()


def test_a_connection_through_the_agent_reaches_the_loopback_port(
    sockets: tuple[InboundSockets, str], echo: int
) -> None:
    box, _ = sockets
    for _ in range(5):  # more than the agent keeps dialed: it dials again
        conn, first = box.connect("sbx", echo, timeout=5)
        assert first == b""
        conn.sendall(b"hello")
        assert conn.recv(100) == b"HELLO"
        conn.close()


def test_no_listener_is_port_unreachable(sockets: tuple[InboundSockets, str]) -> None:
    box, _ = sockets
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(PortUnreachable) as info:
        box.connect("sbx", port, timeout=5)
    assert info.value.context["reason"] == "not_listening" and str(port) in info.value.message


def test_unknown_or_closed_sandbox(sockets: tuple[InboundSockets, str], echo: int) -> None:
    box, _ = sockets
    with pytest.raises(SandboxError):
        box.connect("nope", echo, timeout=0.5)
    box.close("sbx")
    with pytest.raises(SandboxError):
        box.connect("sbx", echo, timeout=0.5)


def _upper(conn: socket.socket, first: bytes, n: int) -> bytes:
    """The echo's first ``n`` bytes: those that came with the answer and the rest."""
    got = first
    while len(got) < n:
        got += conn.recv(100)
    return got


def test_early_bytes_ride_with_the_port_and_the_answer_may_bring_the_reply(
    sockets: tuple[InboundSockets, str], echo: int
) -> None:
    box, _ = sockets
    for _ in range(5):
        conn, first = box.connect("sbx", echo, timeout=5, early=b"hello")
        assert _upper(conn, first, 5) == b"HELLO"
        conn.sendall(b"more")
        assert conn.recv(100) == b"MORE"
        conn.close()
    big = b"x" * (inbound.EARLY_MAX + 1)  # past the verb's bound: sent after the answer
    conn, first = box.connect("sbx", echo, timeout=5, early=big)
    assert _upper(conn, first, len(big)) == big.upper()
    conn.close()


def _legacy_dial(path: str) -> None:
    """An agent from before ``H``: ``P`` alone, anything else closes the connection."""
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            return
        line = inbound.read_line(sock)
        kind, _, port = line.partition(b" ")
        if kind != b"P":
            sock.close()
            continue
        target = socket.create_connection(("127.0.0.1", int(port)))
        sock.sendall(b"K\n")
        threading.Thread(target=_relay, args=(sock, target), daemon=True).start()


def _relay(sock: socket.socket, target: socket.socket) -> None:
    back = threading.Thread(target=_pipe, args=(target, sock), daemon=True)
    back.start()
    _pipe(sock, target)
    back.join(5)
    sock.close()
    target.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)  # the echo serves one connection at a time


def test_an_agent_before_the_head_verb_gets_the_port_alone(tmp_path: Path, echo: int) -> None:
    """A sandbox restored with its memory from an older image runs the older agent: it
    closes on ``H``; the worker marks the sandbox and names the port alone from then."""
    box = InboundSockets()
    box.open("old", tmp_path)
    for _ in range(2):
        args = (str(tmp_path / "inbound.sock"),)
        threading.Thread(target=_legacy_dial, args=args, daemon=True).start()
    try:
        for _ in range(4):
            conn, first = box.connect("old", echo, timeout=5, early=b"ping")
            assert _upper(conn, first, 4) == b"PING"
            conn.close()
    finally:
        box.stop()


def test_the_agent_answers() -> None:
    assert inbound.answer_for(None) == b"K\n"
    refused = inbound.answer_for(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    assert refused.startswith(b"E %d " % errno.ECONNREFUSED) and refused.endswith(b"\n")
    assert b"\n" not in inbound.answer_for(OSError(5, "a\nb"))[:-1]


def test_the_agent_ignores_a_bad_request_line(tmp_path: Path) -> None:
    a, b = socket.socketpair()
    inbound._serve(a, b"P 0")
    assert b.recv(10) == b""  # closed, no answer
    a, b = socket.socketpair()
    inbound._serve(a, b"X 80")
    assert b.recv(10) == b""
    for line, rest in (
        (b"H 80 0", b""),  # no bytes: that is P
        (b"H 80 %d" % (inbound.EARLY_MAX + 1), b""),
        (b"H 80 2", b"abc"),  # more than it said
        (b"P 80", b"abc"),  # P carries none
        (b"H 80", b"ab"),
    ):
        a, b = socket.socketpair()
        inbound._serve(a, line, rest)
        assert b.recv(10) == b"", line
    a, b = socket.socketpair()
    b.close()  # the worker went before the bytes it announced
    inbound._serve(a, b"H 80 5", b"ab")


def test_caps_connections_and_bytes() -> None:
    caps = PortCaps(2, 100, seed=lambda s: 40)
    one, two = caps.admit("s"), caps.admit("s")
    assert caps.open_sessions() == ["s"]
    with pytest.raises(LimitExceeded) as info:
        caps.admit("s")
    assert info.value.code == "port_limit" and info.value.http_status == 429
    one.close()
    one.close()  # idempotent
    assert caps.open_now("s") == 1
    assert two.count(0, 50) == 50
    assert two.count(1, 50) == 10  # 40 seeded + 50 + 10 = the cap: the rest is cut
    assert two.moved == [50, 10]
    assert two.cut
    two.give_back(0, 20)  # counted, never moved (a refusal dropped them)
    assert two.moved == [30, 10] and two.count(0, 30) == 20
    two.close()
    with pytest.raises(LimitExceeded, match="bytes"):
        caps.admit("s")
    assert caps.admit("t").count(0, 5) == 5  # another session has its own


def test_a_line_is_one_line_and_nothing_after() -> None:
    a, b = socket.socketpair()
    a.sendall(b"P 8000\n")
    assert inbound.read_line(b) == b"P 8000"
    a.sendall(b"K\nextra")  # a peer that does not wait for the answer: refused
    assert inbound.read_line(b) == b""
    a.sendall(b"x" * 100)  # no newline within the limit
    assert inbound.read_line(b, 64) == b""
    a.close()
    assert inbound.read_line(b) == b""  # EOF


def test_a_sandbox_socket_in_a_directory_past_the_unix_path_limit_is_listened_on(
    tmp_path: Path,
) -> None:
    """A state directory plus a sandbox's name can pass the 107 bytes of a socket's
    path (a runsc type's name is long): the listener is bound through the
    directory's descriptor. Before: ``OSError: AF_UNIX path too long``, a 500."""
    from worker.ports.sockets import SOCKET_NAME, InboundSockets

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    assert len(str(deep / SOCKET_NAME)) > 108
    sockets = InboundSockets()
    try:
        sockets.open("sandgrid-python-gvisor-0123456789ab", deep)
        assert (deep / SOCKET_NAME).is_socket()
    finally:
        sockets.close("sandgrid-python-gvisor-0123456789ab")
        sockets.stop()
