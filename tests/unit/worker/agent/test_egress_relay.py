"""The agent's egress relay: loopback connections piped to a Unix socket, both ways.

Up to ``MAX_SPLICED`` connections ride splice links, the rest the selector;
splice refused falls back to copying; nothing is left behind.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.agent import egress
from worker.agent.egress import serve_egress

BIG = os.urandom(1 << 20) * 6


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[socket.socket, tuple[str, int]]]:
    """A relay to a Unix socket that a test accepts on: (host listener, relay address)."""
    path = str(tmp_path / "proxy.sock")
    host = socket.socket(socket.AF_UNIX)
    host.bind(path)
    host.listen(64)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    threading.Thread(target=serve_egress, args=(listener, path), daemon=True).start()
    yield host, listener.getsockname()
    host.close()


def echo_upper(host: socket.socket) -> threading.Thread:
    def run() -> None:
        conn, _ = host.accept()
        with conn:
            data = b""
            while chunk := conn.recv(1 << 20):
                data += chunk
            conn.sendall(data.upper())

    t = threading.Thread(target=run)
    t.start()
    return t


def roundtrip(addr: tuple[str, int], data: bytes) -> bytes:
    with socket.create_connection(addr, timeout=20) as c:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := c.recv(1 << 20):
            got += chunk
    return got


def test_relay_pipes_both_ways_with_half_close(
    relay: tuple[socket.socket, tuple[str, int]],
) -> None:
    host, addr = relay
    big = b"abc" * 700_000  # more than the relay buffers
    for _ in range(2):
        t = echo_upper(host)
        with socket.create_connection(addr, timeout=10) as c:
            c.sendall(big)
            c.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := c.recv(65536):
                got += chunk
        t.join(10)
        assert got == big.upper()


def test_no_host_socket_closes_the_connection(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    args = (listener, str(tmp_path / "absent.sock"))
    threading.Thread(target=serve_egress, args=args, daemon=True).start()
    with socket.create_connection(listener.getsockname(), timeout=10) as c:
        assert c.recv(10) == b""


def settle(cond: Any) -> bool:
    deadline = time.monotonic() + 10
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(cond())


def no_link_threads() -> bool:
    return not any(t.name == "egress-link" for t in threading.enumerate())


def test_connections_beyond_the_cap_use_the_selector(
    relay: tuple[socket.socket, tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress, "MAX_SPLICED", 1)
    host, addr = relay
    first = socket.create_connection(addr, timeout=20)  # holds the one splice slot
    conn, _ = host.accept()
    assert settle(lambda: egress.spliced() == 1)
    t = echo_upper(host)
    assert roundtrip(addr, BIG) == BIG.upper()  # relayed by the selector thread
    t.join(20)
    assert egress.spliced() == 1
    first.sendall(b"still here")
    first.shutdown(socket.SHUT_WR)
    assert conn.recv(100) == b"still here"
    conn.close()
    first.close()
    assert settle(lambda: egress.spliced() == 0)


def test_relay_falls_back_to_copying_without_splice(
    relay: tuple[socket.socket, tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any) -> int:
        raise OSError(errno.ENOSYS, "no splice here")

    monkeypatch.setattr(os, "splice", refused)
    host, addr = relay
    for _ in range(2):
        t = echo_upper(host)
        assert roundtrip(addr, BIG) == BIG.upper()
        t.join(20)


def test_many_connections_leave_no_thread_or_fd(
    relay: tuple[socket.socket, tuple[str, int]],
) -> None:
    host, addr = relay
    t = echo_upper(host)  # warm: the relay's own thread and selector exist now
    assert roundtrip(addr, b"warm") == b"WARM"
    t.join(20)
    assert settle(no_link_threads)
    threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
    for i in range(40):
        t = echo_upper(host)
        assert roundtrip(addr, b"abc" * (i * 1000 + 1)) == b"ABC" * (i * 1000 + 1)
        t.join(20)
    assert settle(lambda: egress.spliced() == 0)
    assert settle(no_link_threads)
    assert threading.active_count() == threads
    assert settle(lambda: len(os.listdir("/proc/self/fd")) == fds)
