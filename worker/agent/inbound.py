"""The sandbox side of exposed ports (issue 21.1): the host's connections to loopback ports.

The mirror of ``egress``: there, the agent accepts on the sandbox's loopback
and connects out to the host's Unix socket; here, the agent connects out to
the host's Unix socket ``/run/sandgrid-egress/inbound.sock`` (the worker's
per-sandbox listener, in the same root-only directory) and waits. Nothing in
the sandbox listens for the host, and no network device is needed: under
gVisor, ``--host-uds=open`` lets the sandbox connect to a host socket in its
bind mount, as egress does.

``IDLE`` daemon threads each keep one such connection dialed. When the worker
uses one, it writes ``P <port>\\n``; the thread connects to that port on the
sandbox's loopback (127.0.0.1, then ::1), answers ``K\\n`` or ``E <errno>
<reason>\\n``, hands both sockets to a splice ``Link`` (its two directions on
threads kept for the next connections, ``linkthreads``: no thread start on a
request's path while some wait) and dials again at once. The worker, not the
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

from . import linkthreads, splice
from .errors import log

__all__ = ["IDLE", "INBOUND_SOCKET", "answer_for", "read_line", "start_inbound"]

INBOUND_SOCKET = "/run/sandgrid-egress/inbound.sock"
#: Connections kept dialed and waiting (the worker waits for the next one beyond).
IDLE = 4
_MAX_LINE = 64
_CONNECT_TIMEOUT_S = 5.0
_BACKOFF_S = (0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
#: The links' threads; two per connection, as many idle as the dialed connections need.
_LINKS = linkthreads.Threads(
    "inbound-link", keep=2 * IDLE, report=lambda exc: log(f"inbound: a link failed: {exc!r}")
)


def read_line(sock: socket.socket, limit: int = _MAX_LINE) -> bytes:
    """One short line; b"" at EOF, when it is longer than ``limit``, or when bytes follow
    it. Each side sends one line and waits for the other's, so one read usually takes
    it whole. The worker reads the agent's answers with it."""
    buf = bytearray()
    while b"\n" not in buf and len(buf) < limit:
        chunk = sock.recv(limit)
        if not chunk:
            return b""
        buf += chunk
    line, nl, rest = bytes(buf).partition(b"\n")
    return line if nl and not rest else b""


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


def _serve(host: socket.socket, line: bytes) -> None:
    kind, _, arg = line.partition(b" ")
    if kind != b"P" or not arg.isdigit() or not 0 < int(arg) < 65536:
        host.close()
        return
    try:
        target = _connect_loopback(int(arg))
    except OSError as exc:
        with contextlib.suppress(OSError):
            host.sendall(answer_for(exc))
        host.close()
        return
    try:
        host.sendall(answer_for(None))
    except OSError:
        host.close()
        target.close()
        return
    link = splice.Link(host, target)
    try:
        _LINKS.submit(lambda: link.run_here(spawn=_LINKS.submit))
    except RuntimeError:  # no thread to be had (the pids limit): this connection ends
        host.close()
        target.close()


def _dial(path: str) -> None:
    """Keep one connection dialed; serve it when the worker uses it; again."""
    failures = 0
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            failures = 0
            line = read_line(sock)
        except OSError:
            sock.close()
            time.sleep(_BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)])
            failures += 1
            continue
        if not line:  # the worker closed it (its listener went, or it refused)
            sock.close()
            time.sleep(_BACKOFF_S[1])
            continue
        _serve(sock, line)


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
