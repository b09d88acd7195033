"""The port relay's hops on the host alone, each in its own process (no grid, no sandbox).

Run: ``PYTHONPATH=. python bench/bench_ports_relay.py [--runs 500]`` (``PYTHONPATH``
names the tree measured: another checkout's relay against this one's).

Four processes as on a grid: an ``http.server`` (the sandbox's server), the
agent's inbound dialers (``worker.agent.inbound``), the worker's port listener
(``PortServer`` with an in-memory session table and book), and this one, the
API's side. It prints the p50/p99 of, in one run, alternated round by round:

- ``direct``: a small GET straight to the server (a fresh connection, as
  ``http.server`` closes each);
- ``handshake``: a connect to the listener, the hello and its answer (the
  agent connects to the port), then close;
- ``raw GET``: the same with the request's head sent with the hello, read to
  the end of the answer (what ``forward`` does, without the API);
- ``asyncio GET``: the raw GET on the API's event loop, over the API's own
  connect (``tunnel._connect``), read to the end with ``sock_recv``;
- ``forward``: ``scheduler.ports.forward.forward_http`` over the same
  connect, as the API does it (no HTTP server in front, no lookup): over
  ``asyncio GET``, the cost of httpcore, h11 and the response object.

It profiles where the route's time goes; ``bench_ports.py`` measures the route.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _stats import pct

from sandgrid.wire.portlink import Hello, parse_answer

KEY = b"B" * 32
SMALL = b"x" * 512


def _server(directory: str, ready: Any) -> None:
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=directory))
    ready.send(srv.server_address[1])
    srv.serve_forever()


def _agent(path: str) -> None:
    from worker.agent import inbound

    inbound.INBOUND_SOCKET = path
    inbound.start_inbound()
    while True:
        time.sleep(3600)


def _worker(directory: str, ready: Any) -> None:
    from worker.ports.caps import PortCaps
    from worker.ports.server import PortServer
    from worker.ports.sockets import InboundSockets

    box = InboundSockets()
    box.open("sbx", Path(directory))
    local = SimpleNamespace(sandbox=SimpleNamespace(name="sbx"), last_used=0.0)
    table = SimpleNamespace(get=lambda sid: local if sid == "s-1" else None)
    book = SimpleNamespace(record=lambda session, attempt: None)
    caps = PortCaps(32, 1 << 40, seed=lambda s: 0)
    srv = PortServer("n1", KEY, table, box, caps, book)  # type: ignore[arg-type]
    ready.send(srv.serve("127.0.0.1", 0))
    while True:
        time.sleep(3600)


def _head(port: int) -> bytes:
    return f"GET /small.txt HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


def _read_all(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(65536):
        out += chunk
    return bytes(out)


def direct(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(_head(port))
        assert _read_all(sock).endswith(SMALL)


def _tunnel(
    addr: tuple[str, int], port: int, early: bytes, key: bytes = KEY, session: str = "s-1"
) -> bytes:
    with socket.create_connection(addr) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(Hello.make(session, port).line(key) + early)
        data = _read_all(sock) if early else sock.recv(4096)
    line, _, rest = data.partition(b"\n")
    assert parse_answer(line) is None, line
    return rest


def handshake(listener: int, port: int) -> None:
    _tunnel(("127.0.0.1", listener), port, b"")


def raw_get(addr: tuple[str, int], port: int, key: bytes = KEY, session: str = "s-1") -> None:
    """A GET over a tunnel opened by speaking the hello itself (no API)."""
    assert _tunnel(addr, port, _head(port), key, session).endswith(SMALL)


def forwarder(listener: int, port: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """The asyncio GET and ``forward_http`` as the API calls it, on one event loop kept
    across calls."""
    from starlette.requests import Request

    from scheduler.ports import tunnel
    from scheduler.ports.forward import forward_http

    loop = asyncio.new_event_loop()
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/small.txt",
        "raw_path": b"/small.txt",
        "query_string": b"",
        "headers": [(b"host", b"api"), (b"accept", b"*/*")],
        "scheme": "http",
        "server": ("api", 80),
    }

    async def opener(early: bytes) -> tuple[socket.socket, bytes]:
        hello = Hello.make("s-1", port).line(KEY)
        return await tunnel._connect(("127.0.0.1", listener), hello + early, 5.0)

    async def once() -> None:
        response = await forward_http(Request(scope), opener, port, "/p/x", "small.txt")
        assert bytes(response.body).endswith(SMALL)

    async def plain() -> None:
        sock, first = await opener(_head(port))
        data = bytearray(first)
        while chunk := await loop.sock_recv(sock, 65536):
            data += chunk
        sock.close()
        assert bytes(data).endswith(SMALL)

    return (
        lambda: loop.run_until_complete(plain()),
        lambda: loop.run_until_complete(once()),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as files, tempfile.TemporaryDirectory() as sockets:
        Path(files, "small.txt").write_bytes(SMALL)
        got, sent = ctx.Pipe(duplex=False)
        procs = [ctx.Process(target=_server, args=(files, sent), daemon=True)]
        procs[0].start()
        port = got.recv()
        procs.append(ctx.Process(target=_worker, args=(sockets, sent), daemon=True))
        procs[1].start()
        listener = got.recv()
        procs.append(ctx.Process(target=_agent, args=(f"{sockets}/inbound.sock",), daemon=True))
        procs[2].start()
        time.sleep(1.0)
        plain, forward = forwarder(listener, port)
        cases: dict[str, Callable[[], None]] = {
            "direct": lambda: direct(port),
            "handshake": lambda: handshake(listener, port),
            "raw GET": lambda: raw_get(("127.0.0.1", listener), port),
            "asyncio GET": plain,
            "forward": forward,
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(20):
            for fn in cases.values():
                fn()
        for _ in range(args.runs):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1000)
        for proc in procs:
            proc.kill()
    base = pct(times["direct"], 50)
    for name, values in times.items():
        p50 = pct(values, 50)
        print(f"{name:12s} p50 {p50:6.3f} ms  p99 {pct(values, 99):6.3f} ms  +{p50 - base:.3f}")


if __name__ == "__main__":
    main()
