"""The sandbox side of exposed ports (issue 21.1): the host's connections to loopback ports.

The mirror of ``egress``: there, the agent accepts on the sandbox's loopback
and connects out to the host's Unix socket; here, the agent connects out to
the host's Unix socket ``/run/sandgrid-egress/inbound.sock`` (the worker's
per-sandbox listener, in the same root-only directory) and waits. Nothing in
the sandbox listens for the host, and no network device is needed: under
gVisor, ``--host-uds=open`` lets the sandbox connect to a host socket in its
bind mount, as egress does.

``IDLE`` daemon threads each keep one such connection dialed. When the worker
uses one, it writes ``P <port>\\n``, or ``H <port> <n>\\n`` and the first ``n``
bytes of the stream (at most ``EARLY_MAX``: a request's head, which then
reaches the server as soon as it is connected, not one more round trip
through the worker later); the thread connects to that port on the
sandbox's loopback (127.0.0.1, then ::1), sends those bytes, answers ``K\\n``
or ``E <errno> <reason>\\n``, hands the dialing on to another thread and
relays the two sockets with a splice ``Link`` itself: the answer's direction
in this thread, the other on one more (threads kept for the next connections,
``linkthreads``: no thread start on a request's path while some wait, and no
thread hop between the server's answer and the worker). The worker, not the
sandbox, decides which port and how many bytes. Only the agent (root, no
``DAC_OVERRIDE``) can reach the directory, so the sandbox user can neither
take these connections nor pose as the agent.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
import time
from collections.abc import Callable

from . import linkthreads, splice
from .errors import log

__all__ = [
    "EARLY_MAX",
    "IDLE",
    "INBOUND_SOCKET",
    "answer_for",
    "read_line",
    "split_line",
    "start_inbound",
]

INBOUND_SOCKET = "/run/sandgrid-egress/inbound.sock"
#: Connections kept dialed and waiting (the worker waits for the next one beyond).
IDLE = 4
_MAX_LINE = 64
#: The most bytes an ``H`` request carries (an agent before it closes the connection
#: on the verb, and the worker then writes ``P`` to that sandbox's agent).
EARLY_MAX = 16 << 10
_CONNECT_TIMEOUT_S = 5.0
_BACKOFF_S = (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
#: The links' threads; two per connection, as many idle as the dialed connections need.
_LINKS = linkthreads.Threads(
    "inbound-link", keep=2 * IDLE, report=lambda exc: log(f"inbound: a link failed: {exc!r}")
)


def split_line(sock: socket.socket, limit: int = _MAX_LINE) -> tuple[bytes, bytes] | None:
    """One short line and the bytes read behind it; None at EOF or when no newline
    comes within ``limit`` bytes. Reads at most ``limit`` bytes at a time."""
    buf = bytearray()
    while b"\n" not in buf and len(buf) < limit:
        chunk = sock.recv(limit)
        if not chunk:
            return None
        buf += chunk
    line, nl, rest = bytes(buf).partition(b"\n")
    return (line, rest) if nl else None


def read_line(sock: socket.socket, limit: int = _MAX_LINE) -> bytes:
    """One short line; b"" at EOF, when it is longer than ``limit``, or when bytes follow
    it. Each side sends one line and waits for the other's, so one read usually takes
    it whole."""
    got = split_line(sock, limit)
    return got[0] if got is not None and not got[1] else b""


def _read_exact(sock: socket.socket, n: int, first: bytes) -> bytes | None:
    """``n`` bytes, ``first`` the start of them; None at EOF or if more came."""
    buf = bytearray(first)
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf) if len(buf) == n else None


def _connect_loopback(port: int) -> socket.socket:
    last: OSError = ConnectionRefusedError(errno.ECONNREFUSED, "connection refused")
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(_CONNECT_TIMEOUT_S)
        try:
            sock.connect((host, port))
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last


def answer_for(exc: OSError | None) -> bytes:
    """The agent's answer line for a loopback connect that succeeded (None) or failed."""
    if exc is None:
        return b"K\n"
    code = exc.errno or errno.EIO
    reason = (exc.strerror or type(exc).__name__).replace("\n", " ")[:80]
    return f"E {code} {reason}\n".encode()


def _request(host: socket.socket, line: bytes, rest: bytes) -> tuple[int, bytes] | None:
    """The port a request line names and the bytes it carries; None for a bad one."""
    kind, _, args = line.partition(b" ")
    port, _, size = args.partition(b" ")
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    if kind == b"P" and not size and not rest:
        return int(port), b""
    if kind != b"H" or not size.isdigit() or not 0 < int(size) <= EARLY_MAX:
        return None
    early = _read_exact(host, int(size), rest)
    return None if early is None else (int(port), early)


def _open_target(port: int, early: bytes) -> socket.socket:
    """The connection to ``port`` on the loopback, ``early`` sent on it."""
    target = _connect_loopback(port)
    try:
        if early:
            target.sendall(early)
    except OSError:
        target.close()
        raise
    return target


def _serve(
    host: socket.socket,
    line: bytes,
    rest: bytes = b"",
    hand_on: Callable[[], None] = lambda: None,
) -> bool:
    """Serve the worker's request ``line``; once the port is connected, ``hand_on`` the
    dialing to another thread and relay here, the answer's direction in this thread
    (no thread hop on its way back). Whether it was relayed."""
    try:
        request = _request(host, line, rest)
    except OSError:
        request = None
    if request is None:
        host.close()
        return False
    try:
        target = _open_target(*request)
    except OSError as exc:
        with contextlib.suppress(OSError):
            host.sendall(answer_for(exc))
        host.close()
        return False
    try:
        host.sendall(answer_for(None))
        hand_on()
    except (OSError, RuntimeError):  # RuntimeError: no thread to be had (the pids limit)
        host.close()
        target.close()
        return False
    splice.Link(target, host).run_here(spawn=_LINKS.submit)
    return True


def _dial(path: str) -> None:
    """Keep one connection dialed until the worker uses it, then relay it here while
    another thread dials (``_serve``); a connection not relayed is dialed again here."""
    failures = 0
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            failures = 0
            got = split_line(sock)
        except OSError:
            sock.close()
            time.sleep(_BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)])
            failures += 1
            continue
        if got is None:  # the worker closed it (its listener went, or it refused)
            sock.close()
            time.sleep(_BACKOFF_S[1])
            continue
        if _serve(sock, *got, hand_on=lambda: _LINKS.submit(lambda: _dial(path))):
            return


def start_inbound() -> bool:
    """Start the dialing threads if the sandbox has the socket directory.

    Returns:
        Whether they started.
    """
    if not os.path.isdir(os.path.dirname(INBOUND_SOCKET)):
        return False
    for i in range(IDLE):
        name = f"inbound-{i}"
        threading.Thread(target=_dial, args=(INBOUND_SOCKET,), name=name, daemon=True).start()
    return True
