"""The benchmarks' round-robin balancer (bench/_balancer.py, 22.4): each new
connection goes to the next API process, bytes both ways unchanged."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.support.bench_modules import bench_module


class _Named(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = self.request.recv(100)
        self.request.sendall(f"{self.server.server_address[1]}:".encode() + data)


@pytest.fixture
def backends() -> Iterator[list[int]]:
    servers = [socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Named) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield [s.server_address[1] for s in servers]
    for s in servers:
        s.shutdown()
        s.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connections_alternate_between_the_backends(backends: list[int]) -> None:
    port = _free_port()
    balancer = bench_module("_balancer").RoundRobin(port, backends).start()
    try:
        answers = []
        for i in range(4):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(f"turn{i}".encode())
                answers.append(conn.recv(100).decode())
    finally:
        balancer.stop()
    a, b = backends
    assert answers == [f"{a}:turn0", f"{b}:turn1", f"{a}:turn2", f"{b}:turn3"]
    assert balancer.connections == {a: 2, b: 2}
