"""The agent's egress relay: loopback connections piped to a Unix socket, both ways."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from worker.agent.egress import serve_egress


def test_relay_pipes_both_ways_with_half_close(tmp_path: Path) -> None:
    path = str(tmp_path / "proxy.sock")
    host = socket.socket(socket.AF_UNIX)
    host.bind(path)
    host.listen(4)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    threading.Thread(target=serve_egress, args=(listener, path), daemon=True).start()

    def echo_upper() -> None:
        conn, _ = host.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
            conn.sendall(data.upper())

    big = b"abc" * 700_000  # more than the relay buffers
    for _ in range(2):
        t = threading.Thread(target=echo_upper)
        t.start()
        with socket.create_connection(listener.getsockname(), timeout=10) as c:
            c.sendall(big)
            c.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := c.recv(65536):
                got += chunk
        t.join(10)
        assert got == big.upper()
    host.close()


def test_no_host_socket_closes_the_connection(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    args = (listener, str(tmp_path / "absent.sock"))
    threading.Thread(target=serve_egress, args=args, daemon=True).start()
    with socket.create_connection(listener.getsockname(), timeout=10) as c:
        assert c.recv(10) == b""
