"""The worker's port listener: the API's connections to its sessions' sandbox ports.

A TCP listener on ``SANDGRID_PORTS__LISTEN_ADDR`` (loopback by default; the
heartbeat says where, ``NodeRecord.ports_addr``). Each connection starts with
the API's signed hello (``sandgrid.wire.portlink``); one that does not verify
is closed without a word. Then: the session must be live here (else 503,
``worker_lost``: the API looks again), its caps must allow one more connection
(``PortCaps``; else 429), and the sandbox's agent must connect to the port on
its loopback (``InboundSockets.connect``; else 502, ``port_not_listening``).
On success the worker answers ok and a splice ``Link`` relays the bytes both
ways, counting each chunk against the byte cap, until either side ends: the
connection's own thread, the one that accepted it (it hands the accepting on
to another first), carries the answer, sandbox -> API, and one more thread
API -> sandbox (``Link.run_here``), both kept for the next connections
(``Threads``): no thread hop between the accept and the answer. The
bytes the API sent behind its hello (a request's head) go to the agent with
the port (``InboundSockets.connect``), counted as any, so the server has them
as soon as the agent connected. A refusal drops them (and gives their count
back): its answer is sent, the connection is shut for
writing and read to its end (``_refuse``), so the API reads the answer rather
than a reset. Then the connection is recorded (``PortBook``). A session with
a connection open is marked used every ``_TOUCH_S`` by one thread of the
listener (an open WebSocket is activity: the reaper does not release the
session under it).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

from sandgrid.errors import ErrorCode, InfrastructureError, InvalidInput, SandgridError
from sandgrid.models import NetworkAttempt
from sandgrid.wire.portlink import MAX_LINE, answer_line, read_hello
from worker.agent.linkthreads import Threads
from worker.agent.splice import Link
from worker.ports.audit import PortBook
from worker.ports.caps import PortCaps, Ticket
from worker.ports.sockets import InboundSockets
from worker.sessions.table import SessionTable

__all__ = ["PortServer"]

log = logging.getLogger(__name__)

#: How often an open connection marks its session used (the reaper's idle TTL is minutes).
_TOUCH_S = 10.0


def _read_hello(sock: socket.socket) -> tuple[bytes, bytes]:
    """The hello line, and the early bytes read with it (the start of the port's stream)."""
    buf = bytearray()
    while len(buf) <= MAX_LINE:
        chunk = sock.recv(MAX_LINE + 1 - len(buf))
        if not chunk:
            break
        buf += chunk
        if b"\n" in chunk:
            break
    line, nl, rest = bytes(buf).partition(b"\n")
    if not nl:
        raise ValueError("no hello line")
    return line, rest


class PortServer:
    """Serves the API's port connections for the sessions of this node.

    Args:
        node: this node's name (in the audit).
        key: the ``link`` key (``sandgrid.wire.portkeys``).
        sessions: the node's session table.
        inbound: the agents' connections.
        caps: the sessions' caps.
        book: the audit and usage.
        reserved: ports no connection may name (the agent's own egress port).
        timeout_s: the hello, and the agent's connect, within this.
    """

    def __init__(
        self,
        node: str,
        key: bytes,
        sessions: SessionTable,
        inbound: InboundSockets,
        caps: PortCaps,
        book: PortBook,
        *,
        reserved: frozenset[int] = frozenset(),
        timeout_s: float = 5.0,
    ) -> None:
        self.node = node
        self.key = key
        self.sessions = sessions
        self.inbound = inbound
        self.caps = caps
        self.book = book
        self.reserved = reserved
        self.timeout_s = timeout_s
        self._listener: socket.socket | None = None
        self._stopped = threading.Event()
        self.threads = Threads("ports", report=lambda _exc: log.exception("ports: a task failed"))

    def serve(self, addr: str, port: int) -> int:
        """Start listening on ``addr:port`` (0: any); the bound port."""
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        listener = socket.create_server((addr, port), family=family, backlog=128)
        self._listener = listener
        self.threads.submit(self._accept)
        threading.Thread(target=self._touch_open, name="ports-touch", daemon=True).start()
        return int(listener.getsockname()[1])

    def stop(self) -> None:
        self._stopped.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the accepting thread (EINVAL)
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()

    def _accept(self) -> None:
        """Wait for the next connection, hand the waiting on to another thread and
        serve this one here: no thread hop between the accept and the hello."""
        assert self._listener is not None
        while not self._stopped.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                time.sleep(0.01)  # EMFILE and the like: the connection waits in the backlog
                continue
            try:
                self.threads.submit(self._accept)
            except RuntimeError:  # no thread to be had: this connection is refused
                sock.close()
                continue
            try:
                self.handle(sock)
            finally:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                sock.close()
            return

    def handle(self, sock: socket.socket) -> None:
        """One connection of the API, from its hello to the relay's end."""
        sock.settimeout(self.timeout_s)
        try:
            line, early = _read_hello(sock)
            hello = read_hello(self.key, line)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ports: a connection without a valid hello was closed (%s)", exc)
            return
        t0 = time.time()
        try:
            agent, ticket, first = self._open(hello.session, hello.port, early)
        except SandgridError as exc:
            self._record(hello.session, hello.port, t0, None, exc)
            _refuse(sock, answer_line(exc), min(1.0, self.timeout_s))
            return
        try:
            sock.sendall(answer_line())
        except OSError:
            agent.close()
            ticket.close()
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._relay(sock, agent, ticket, hello.port, t0, first)

    def _open(self, session: str, port: int, early: bytes) -> tuple[socket.socket, Ticket, bytes]:
        """The agent's connection to the port, ``early`` sent on it; the ticket that
        counts it, and the port's bytes that came with the agent's answer."""
        if port in self.reserved:
            raise InvalidInput(
                f"port {port} is the sandbox agent's own",
                operation="ports",
                context={"field": "port", "rule": "not a port the sandbox type reserves"},
            )
        local = self.sessions.get(session)
        if local is None:
            raise InfrastructureError(
                f"session {session} is not live on node {self.node}",
                code=ErrorCode.WORKER_LOST,
                operation="ports",
                retryable=True,
            )
        self._touch(session)
        ticket = self.caps.admit(session)
        allowed = ticket.count(0, len(early)) if early else 0
        try:
            agent, first = self.inbound.connect(
                local.sandbox.name, port, self.timeout_s, early[:allowed]
            )
        except SandgridError:
            ticket.give_back(0, allowed)  # a refusal dropped them
            ticket.close()
            raise
        return agent, ticket, first

    def _relay(
        self,
        sock: socket.socket,
        agent: socket.socket,
        ticket: Ticket,
        port: int,
        t0: float,
        first: bytes,
    ) -> None:
        # The ticket says whether a count fell short, the early bytes' or the link's.
        if not ticket.cut:  # (the early bytes crossed the byte cap: what fit went, no more)
            done = threading.Event()
            link = Link(
                agent,  # the answer's direction runs here: no thread hop on its way
                sock,
                lambda direction, n: ticket.count(1 - direction, n),
                lambda _: done.set(),
                pending=(first, b""),
            )
            link.run_here(spawn=self.threads.submit)
            done.wait()  # the answer's direction too: the bytes are counted when it ends
        sock.close()
        agent.close()
        ticket.close()
        self._touch(ticket.session)
        reason = "cut: the session's byte cap" if ticket.cut else ""
        self._record(ticket.session, port, t0, ticket, None, reason=reason)

    def _touch_open(self) -> None:
        while not self._stopped.wait(_TOUCH_S):
            for session in self.caps.open_sessions():
                self._touch(session)

    def _touch(self, session: str) -> None:
        local = self.sessions.get(session)
        if local is not None:
            local.last_used = time.monotonic()

    def _record(
        self,
        session: str,
        port: int,
        t0: float,
        ticket: Ticket | None,
        error: SandgridError | None,
        *,
        reason: str = "",
    ) -> None:
        moved = ticket.moved if ticket is not None else [0, 0]
        attempt = NetworkAttempt(
            ts=t0,
            host="127.0.0.1",
            port=port,
            address="127.0.0.1",
            allowed=error is None,
            rule="inbound",
            reason=reason or (str(error.code) if error is not None else ""),
            protocol="inbound",
            sent=moved[1],
            received=moved[0],
            duration_ms=(time.time() - t0) * 1000,
            node=self.node,
        )
        self.book.record(session, attempt)


def _refuse(sock: socket.socket, answer: bytes, linger_s: float) -> None:
    """Send the refusal and read the API's bytes to its end (it closes after the answer):
    closing with unread early bytes would reset the connection, the answer with it."""
    with contextlib.suppress(OSError):
        sock.sendall(answer)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(linger_s)
        while sock.recv(MAX_LINE):
            pass
