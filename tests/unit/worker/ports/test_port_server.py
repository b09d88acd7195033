"""The worker's port listener over real sockets: the hello, the session, the caps, the audit.

The API's side is played by a plain socket sending ``Hello.line``; the agent's
by its own dialing threads on a temporary directory; the session table holds
one session whose sandbox is that directory's.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandgrid.models import NetworkAttempt
from sandgrid.wire.portlink import Hello, parse_answer
from worker.agent import inbound
from worker.ports import server as port_server
from worker.ports.caps import PortCaps
from worker.ports.server import PortServer
from worker.ports.sockets import InboundSockets

KEY = b"L" * 32


class Book:
    def __init__(self) -> None:
        self.attempts: list[NetworkAttempt] = []

    def record(self, session_id: str, attempt: NetworkAttempt) -> None:
        self.attempts.append(attempt)


@pytest.fixture
def echo() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            while data := c.recv(65536):
                c.sendall(data)
            c.close()

    threading.Thread(target=run, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


@pytest.fixture
def server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[PortServer, Book, Any]]:
    monkeypatch.setattr(port_server, "_TOUCH_S", 0.05)
    box = InboundSockets()
    box.open("sbx", tmp_path)
    for _ in range(2):
        args = (str(tmp_path / "inbound.sock"),)
        threading.Thread(target=inbound._dial, args=args, daemon=True).start()
    local = SimpleNamespace(sandbox=SimpleNamespace(name="sbx"), last_used=0.0)
    table = SimpleNamespace(get=lambda sid: local if sid == "s-1" else None)
    book = Book()
    caps = PortCaps(1, 1000, seed=lambda s: 0)
    srv = PortServer("n1", KEY, table, box, caps, book, reserved=frozenset({3128}), timeout_s=3)  # type: ignore[arg-type]
    port = srv.serve("127.0.0.1", 0)
    yield srv, book, (port, local)
    srv.stop()
    box.stop()


def _open(port: int, hello: bytes) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(hello)
    answer = inbound.read_line(sock, 4096)
    return sock, answer


def _recorded(book: Book) -> list[NetworkAttempt]:
    """The book's attempts once the relay has ended and recorded its connection."""
    for _ in range(50):
        if book.attempts:
            break
        time.sleep(0.05)
    return book.attempts


def _answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """The answer line, and the port's bytes read with it."""
    buf = b""
    while b"\n" not in buf and (chunk := sock.recv(4096)):
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    return line, rest


def test_a_signed_hello_opens_the_port_and_is_audited(server: Any, echo: int) -> None:
    _srv, book, (port, local) = server
    sock, answer = _open(port, Hello.make("s-1", echo).line(KEY))
    assert parse_answer(answer) is None and local.last_used > 0
    sock.sendall(b"ping")
    assert sock.recv(10) == b"ping"
    sock.close()
    (attempt,) = _recorded(book)
    assert attempt.allowed and attempt.protocol == "inbound" and attempt.port == echo
    assert (attempt.received, attempt.sent) == (4, 4)


def test_refusals_answer_the_apis_error(server: Any, echo: int) -> None:
    _srv, book, (port, _) = server
    _, answer = _open(port, Hello.make("s-other", echo).line(KEY))
    assert json.loads(answer)["status"] == 503  # not on this node: the API looks again
    _, answer = _open(port, Hello.make("s-1", 3128).line(KEY))
    assert json.loads(answer)["status"] == 422
    held, answer = _open(port, Hello.make("s-1", echo).line(KEY))
    assert parse_answer(answer) is None
    _, answer = _open(port, Hello.make("s-1", echo).line(KEY))  # the cap is 1
    assert json.loads(answer)["error"]["code"] == "port_limit"
    held.close()
    assert any(not a.allowed and a.reason == "port_limit" for a in book.attempts)


def test_a_bad_hello_is_closed_unanswered(server: Any, echo: int) -> None:
    _, _, (port, _) = server
    for hello in (Hello.make("s-1", echo).line(b"x" * 32), b"garbage\n", b"{}\n"):
        _, answer = _open(port, hello)
        assert answer == b""


def test_bytes_sent_with_the_hello_reach_the_port_first_and_are_counted(
    server: Any, echo: int
) -> None:
    _srv, book, (port, _) = server
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(Hello.make("s-1", echo).line(KEY) + b"ping")  # not waiting for the answer
    answer, got = _answer(sock)
    assert parse_answer(answer) is None
    while len(got) < 4:  # the echo may come in the answer's read or after it
        got += sock.recv(10)
    assert got.endswith(b"ping")
    sock.close()
    (attempt,) = _recorded(book)
    assert attempt.allowed and (attempt.received, attempt.sent) == (4, 4)


def test_a_refusal_with_early_bytes_is_still_answered(server: Any) -> None:
    _srv, book, (port, _) = server
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    closed = free.getsockname()[1]
    free.close()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(Hello.make("s-1", closed).line(KEY) + b"GET / HTTP/1.1\r\n" + b"x" * 20000)
    answer = json.loads(_answer(sock)[0])
    assert answer["status"] == 502 and answer["error"]["code"] == "port_not_listening"
    assert sock.recv(10) == b""  # then the worker's end: no early byte went anywhere
    sock.close()
    assert [a.allowed for a in book.attempts] == [False]


def test_an_open_connection_keeps_its_session_used(server: Any, echo: int) -> None:
    """An open WebSocket is activity: the listener marks the session used while it lasts."""
    _srv, _, (port, local) = server
    sock, answer = _open(port, Hello.make("s-1", echo).line(KEY))
    assert parse_answer(answer) is None
    local.last_used = 0.0
    for _ in range(100):
        if local.last_used > 0:
            break
        time.sleep(0.05)
    assert local.last_used > 0
    sock.close()


def test_a_held_request_whose_head_came_with_the_hello_counts_against_the_cap(
    server: Any, echo: int
) -> None:
    """A POST whose head went early and whose body never ends (a client holding it
    half-open) is an open connection until the API closes it: the next is 429."""
    _srv, book, (port, _) = server
    head = b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n"
    held = socket.create_connection(("127.0.0.1", port), timeout=5)
    held.sendall(Hello.make("s-1", echo).line(KEY) + head)  # not waiting for the answer
    answer, _ = _answer(held)
    assert parse_answer(answer) is None
    held.sendall(b"x" * 100)  # the body's start, after the answer; then nothing
    for _ in range(3):  # the cap is 1: held, it refuses every other
        _, refusal = _open(port, Hello.make("s-1", echo).line(KEY))
        assert json.loads(refusal)["error"]["code"] == "port_limit"
    held.close()
    for _ in range(50):  # closed, its slot is free once the relay ended
        sock, answer = _open(port, Hello.make("s-1", echo).line(KEY))
        if parse_answer(answer) is None:
            break
        time.sleep(0.05)
    assert parse_answer(answer) is None
    sock.close()
    refused = [a.reason for a in book.attempts if not a.allowed]
    assert len(refused) >= 3 and set(refused) == {"port_limit"}


def test_early_bytes_past_the_byte_cap_go_as_far_as_it_allows_and_cut(
    server: Any, echo: int
) -> None:
    _srv, book, (port, _) = server  # the cap is 1000 bytes
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(Hello.make("s-1", echo).line(KEY) + b"x" * 1500)
    answer, _ = _answer(sock)
    assert parse_answer(answer) is None
    while sock.recv(4096):  # then the worker's end
        pass
    sock.close()
    (attempt,) = _recorded(book)
    assert attempt.received == 1000 and attempt.reason.startswith("cut")


def test_a_refusal_gives_the_early_bytes_count_back(server: Any, echo: int) -> None:
    _srv, book, (port, _) = server  # the cap is 1000 bytes
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    closed = free.getsockname()[1]
    free.close()
    for _ in range(2):  # 800 bytes refused: none of them counts
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(Hello.make("s-1", closed).line(KEY) + b"x" * 400)
        assert json.loads(_answer(sock)[0])["status"] == 502
        sock.close()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(Hello.make("s-1", echo).line(KEY) + b"y" * 400)
    answer, got = _answer(sock)
    assert parse_answer(answer) is None
    while len(got) < 400 and (chunk := sock.recv(4096)):
        got += chunk
    sock.close()
    assert got == b"y" * 400  # 400 each way: within the cap, with nothing counted before
    for _ in range(50):
        if len(book.attempts) == 3:
            break
        time.sleep(0.05)
    assert [a.reason for a in book.attempts if a.allowed] == [""]


def test_the_audit_tells_the_bytes_to_the_sandbox_from_those_it_sent(server: Any) -> None:
    _srv, book, (port, _) = server
    srv = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        c, _ = srv.accept()
        with c:
            c.recv(4)
            c.sendall(b"0123456789")

    threading.Thread(target=answer, daemon=True).start()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(Hello.make("s-1", srv.getsockname()[1]).line(KEY) + b"ping")
    answer_line, got = _answer(sock)
    assert parse_answer(answer_line) is None
    while chunk := sock.recv(100):
        got += chunk
    assert got == b"0123456789"
    sock.close()
    srv.close()
    (attempt,) = _recorded(book)
    assert (attempt.received, attempt.sent) == (4, 10)
