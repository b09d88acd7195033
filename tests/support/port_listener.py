"""A worker's port listener, faked: the API's side of the port routes without a sandbox.

It answers every hello ok (``sandgrid.wire.portlink``) and then one HTTP request
with ``200 port <port>``, so a unit test or a bench on the in-process grid
(``tests.support.fakes``) reaches "the sandbox's server" through the API's real
tunnel and relay. Name its ``addr`` in the fake worker's heartbeat
(``ports_addr``) for a session the worker owns.
"""

from __future__ import annotations

import json
import socketserver
import threading

from sandgrid.wire.portlink import answer_line

__all__ = ["PortListener"]


class PortListener(socketserver.ThreadingTCPServer):
    """A worker's port listener that serves every port: it answers the hello ok, then
    ``200 port <port>`` to one HTTP request; ``hellos`` counts the connections it took
    (a refused URL never makes one)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.addr = f"127.0.0.1:{self.server_address[1]}"
        self.hellos = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Relay(socketserver.StreamRequestHandler):
    server: PortListener

    def handle(self) -> None:
        hello = json.loads(self.rfile.readline())
        self.server.hellos += 1
        self.wfile.write(answer_line())
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        body = f"port {hello['p']}".encode()
        self.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
