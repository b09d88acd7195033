"""Moving the bytes of a relayed connection with ``splice(2)``: no copy through Python.

Both ends of egress relay whole connections once they are set up: the agent's
loopback relay (sandbox side) and the node's egress proxy after its policy
allowed a connection (host side). A ``Link`` relays two blocking sockets with
one thread per direction; each thread moves its bytes socket -> pipe -> socket
with ``os.splice`` (a pipe of ``PIPE_SIZE``), so the kernel moves pages and the
interpreter only loops once per chunk. Where a pair of descriptors cannot be
spliced (``EINVAL``, ``ENOSYS``, ``EOPNOTSUPP``: gVisor may refuse some), that
direction falls back to ``recv_into`` / ``sendall`` on one reused buffer.

Half-close: when a direction reads EOF, writing is shut down on its
destination and the other direction keeps flowing until its own EOF. An error
in either direction, a ``count`` that says stop (a byte quota), or ``abort()``
shuts both sockets down, which wakes the other thread; the sockets are closed
once both threads are done, and ``on_done`` is called then, once.

Stdlib only: the agent runs it in the sandbox; the worker imports it as it
imports the agent's other pure modules (framing, limits).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import threading
from collections.abc import Callable

__all__ = ["CHUNK", "PIPE_SIZE", "THREAD_NAME", "UNSPLICEABLE", "Count", "Link", "pump"]

#: The pipe between the two sockets of a direction (``F_SETPIPE_SZ``; 64 KiB if refused).
PIPE_SIZE = 1 << 20
#: The most one splice (or one ``recv_into`` of the fallback) moves.
CHUNK = 1 << 20
#: The name of a link's threads.
THREAD_NAME = "egress-link"
#: The errors that mean "these descriptors cannot be spliced": fall back to copying.
UNSPLICEABLE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})

#: ``count(direction, nbytes)`` before the bytes are forwarded: how many of them may
#: be; fewer than ``nbytes`` forwards those and then cuts the link (a byte quota).
Count = Callable[[int, int], int]


class _Cut(Exception):
    """``count`` allowed less than a chunk: the link is cut after what it allowed."""


def pump(src: socket.socket, dst: socket.socket, count: Callable[[int], int]) -> None:
    """Move bytes from ``src`` to ``dst`` until EOF on ``src`` (both blocking).

    Args:
        src: read from here.
        dst: written here; not shut down (the caller does, for half-close).
        count: told each chunk's size before it is forwarded; says how much may be.

    Raises:
        _Cut: ``count`` allowed less than a chunk (only that much was forwarded).
        OSError: either socket failed.
    """
    try:
        r, w = os.pipe2(os.O_CLOEXEC)
    except OSError:
        _copy(src, dst, count)
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        _splice(src, dst, r, w, count)
    finally:
        os.close(r)
        os.close(w)


def _splice(
    src: socket.socket, dst: socket.socket, r: int, w: int, count: Callable[[int], int]
) -> None:
    sfd = src.fileno()
    while True:
        try:
            n = os.splice(sfd, w, CHUNK)
        except OSError as exc:
            if exc.errno not in UNSPLICEABLE:
                raise
            _copy(src, dst, count)  # nothing was moved by the failed call
            return
        if n == 0:
            return
        allowed = count(n)
        spliced = _drain(r, dst, allowed)
        if allowed < n:
            raise _Cut  # the rest dies with the pipe
        if not spliced:
            _copy(src, dst, count)
            return


def _drain(r: int, dst: socket.socket, n: int) -> bool:
    """Empty the pipe's ``n`` bytes into ``dst``; False if it had to copy them."""
    while n:
        try:
            moved = os.splice(r, dst.fileno(), n)
        except OSError as exc:
            if exc.errno not in UNSPLICEABLE:
                raise
            while n:
                data = os.read(r, n)
                dst.sendall(data)
                n -= len(data)
            return False
        if moved == 0:
            raise BrokenPipeError(errno.EPIPE, "splice wrote nothing")
        n -= moved
    return True


def _copy(src: socket.socket, dst: socket.socket, count: Callable[[int], int]) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    while n := src.recv_into(buf):
        allowed = count(n)
        dst.sendall(view[:allowed])
        if allowed < n:
            raise _Cut


class Link:
    """Two connected sockets relayed both ways, one blocking thread per direction
    (``start``), or the caller's thread for a -> b and one started for b -> a
    (``run_here``: a thread start less per connection, and a's pending bytes go out
    before any thread starts).

    Args:
        a: one side (the one that connected to us); owned by the link from ``start``.
        b: the other side; owned likewise.
        count: told every chunk (0: a -> b, 1: b -> a) before it is forwarded.
        on_done: called once, after both threads ended and both sockets closed.
        pending: bytes already read, sent first (a -> b, b -> a) and counted.
    """

    def __init__(
        self,
        a: socket.socket,
        b: socket.socket,
        count: Count | None = None,
        on_done: Callable[[Link], None] | None = None,
        pending: tuple[bytes, bytes] = (b"", b""),
    ) -> None:
        self.socks = (a, b)
        self.count = count
        self.on_done = on_done
        self.pending = pending
        self.cut = False
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._running = 2
        self._closed = False

    def start(self) -> None:
        """Start both directions. With no thread to be had (a pids limit reached),
        the link ends at once (``error`` says why) instead of raising in the caller."""
        for s in self.socks:
            s.setblocking(True)
        for idx in (0, 1):
            thread = threading.Thread(target=self._run, args=(idx,), name=THREAD_NAME, daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:
                self.error = exc
                self.abort()
                for _ in range(idx, 2):  # the directions that never ran
                    self._finish()
                return

    def run_here(self, spawn: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Relay a -> b in the calling thread and b -> a in one more (``spawn`` runs it on
        a thread, by default a new one); return when a -> b ended (``on_done`` says when
        both did). With no thread to be had (``spawn`` raised RuntimeError), the link ends
        as ``start``'s does."""
        for s in self.socks:
            s.setblocking(True)
        started: list[bool] = []

        def other() -> None:
            started.append(True)
            try:
                if spawn is None:
                    name = THREAD_NAME
                    threading.Thread(target=self._run, args=(1,), name=name, daemon=True).start()
                else:
                    spawn(lambda: self._run(1))
            except RuntimeError as exc:
                self.error = exc
                self.abort()
                self._finish()

        self._run(0, then=other)
        if not started:  # a -> b failed on its pending bytes: b -> a never ran
            self._finish()

    def abort(self) -> None:
        """Stop both directions now (idempotent, from any thread)."""
        with self._lock:
            if self._closed:
                return
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _run(self, idx: int, then: Callable[[], None] | None = None) -> None:
        """One direction: its pending bytes, ``then`` (``run_here``'s other direction),
        the pump."""
        src, dst = self.socks[idx], self.socks[1 - idx]

        def count(n: int) -> int:
            return n if self.count is None else self.count(idx, n)

        try:
            first = self.pending[idx]
            if first:
                allowed = count(len(first))
                dst.sendall(first[:allowed])
                if allowed < len(first):
                    raise _Cut
            if then is not None:
                then()
            pump(src, dst, count)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
        except _Cut:
            self.cut = True
            self.abort()
        except BaseException as exc:  # any failure ends the whole link
            self.error = self.error or exc
            self.abort()
        finally:
            self._finish()

    def _finish(self) -> None:
        with self._lock:
            self._running -= 1
            if self._running:
                return
            self._closed = True
            for s in self.socks:
                s.close()
        if self.on_done is not None:
            self.on_done(self)
