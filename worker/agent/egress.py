"""The sandbox side of egress: a loopback proxy port relayed to the host's proxy.

A daemon thread of the agent (root, so the sandbox user cannot signal it, and
it outlives every exec) listens on ``127.0.0.1:$SANDGRID_EGRESS_PORT`` and
relays each connection, byte for byte, to a new connection on the Unix socket
``/run/sandgrid-egress/proxy.sock``, which the worker's egress proxy serves on
the host. Nothing is parsed here: the host reads the protocol (HTTP CONNECT,
plain HTTP, SOCKS5) and applies the policy.

Up to ``MAX_SPLICED`` connections at a time are each relayed by a ``Link`` of
``splice``: two blocking threads moving the bytes kernel-side, the cheapest
path per byte (``splice.py``). Beyond that (threads count against the
sandbox's pids limit), the selector thread multiplexes the rest itself, with
a bounded buffer each way.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading

from . import splice
from .errors import log

__all__ = ["EGRESS_SOCKET", "MAX_SPLICED", "Link", "serve_egress", "spliced", "start_egress"]

EGRESS_SOCKET = "/run/sandgrid-egress/proxy.sock"
_CHUNK = 256 << 10
_HIGH = 2 << 20  # stop reading a side while this much waits for its peer
_RW = selectors.EVENT_READ | selectors.EVENT_WRITE
#: The most connections relayed by splice threads at once (two threads each).
MAX_SPLICED = 16
_spliced: set[splice.Link] = set()
_spliced_lock = threading.Lock()


def spliced() -> int:
    """How many connections splice threads relay now."""
    with _spliced_lock:
        return len(_spliced)


def _unregister(link: splice.Link) -> None:
    with _spliced_lock:
        _spliced.discard(link)


class Link:
    """Two sockets relayed both ways, with half-close, in one selector."""

    def __init__(self, sel: selectors.BaseSelector, a: socket.socket, b: socket.socket) -> None:
        self.sel = sel
        self.peer = {a: b, b: a}
        self.out: dict[socket.socket, bytearray] = {a: bytearray(), b: bytearray()}
        self.eof: dict[socket.socket, bool] = {a: False, b: False}
        self.registered: set[socket.socket] = set()
        for s in (a, b):
            s.setblocking(False)
        self._interest()

    def on_event(self, sock: socket.socket, mask: int) -> None:
        try:
            if mask & selectors.EVENT_READ:
                self._read(sock)
            if mask & selectors.EVENT_WRITE:
                self._write(sock)
        except OSError:
            self.close()
            return
        if all(self.eof.values()) and not any(self.out.values()):
            self.close()
        else:
            self._interest()

    def _read(self, sock: socket.socket) -> None:
        data = sock.recv(_CHUNK)
        peer = self.peer[sock]
        if data:
            self.out[peer] += data
            return
        self.eof[sock] = True
        if not self.out[peer]:
            peer.shutdown(socket.SHUT_WR)

    def _write(self, sock: socket.socket) -> None:
        buf = self.out[sock]
        if buf:
            del buf[: sock.send(buf)]
        if not buf and self.eof[self.peer[sock]]:
            sock.shutdown(socket.SHUT_WR)

    def _interest(self) -> None:
        for s in self.peer:
            ev = 0
            if not self.eof[s] and len(self.out[self.peer[s]]) < _HIGH:
                ev |= selectors.EVENT_READ
            if self.out[s]:
                ev |= selectors.EVENT_WRITE
            if ev and s in self.registered:
                self.sel.modify(s, ev, self)
            elif ev:
                self.sel.register(s, ev, self)
                self.registered.add(s)
            elif s in self.registered:
                self.sel.unregister(s)
                self.registered.discard(s)

    def close(self) -> None:
        for s in self.peer:
            if s in self.registered:
                self.sel.unregister(s)
            s.close()
        self.registered.clear()


def serve_egress(listener: socket.socket, path: str) -> None:
    """Accept on ``listener`` and relay each connection to the Unix socket ``path``."""
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, mask in sel.select():
            if key.data is None:
                _accept(sel, listener, path)
            else:
                key.data.on_event(key.fileobj, mask)


def _accept(sel: selectors.BaseSelector, listener: socket.socket, path: str) -> None:
    try:
        client, _ = listener.accept()
    except OSError:
        return
    host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        host.connect(path)
    except OSError as exc:
        log(f"egress: cannot reach the host proxy at {path}: {exc}")
        client.close()
        host.close()
        return
    with _spliced_lock:
        if len(_spliced) < MAX_SPLICED:
            link = splice.Link(client, host, on_done=_unregister)
            _spliced.add(link)
        else:
            Link(sel, client, host)
            return
    link.start()


def start_egress() -> bool:
    """Start the relay thread if the sandbox has an egress directory and a port.

    Returns:
        Whether it started.
    """
    port = os.environ.get("SANDGRID_EGRESS_PORT", "")
    if not port.isdigit() or not os.path.isdir(os.path.dirname(EGRESS_SOCKET)):
        return False
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(128)
    listener.setblocking(False)
    args = (listener, EGRESS_SOCKET)
    threading.Thread(target=serve_egress, args=args, name="egress", daemon=True).start()
    return True
