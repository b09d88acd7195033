"""The agents' connections, waiting to be used: one Unix listener per sandbox.

Each sandbox's directory (the egress one, ``<state_dir>/<node>/<name>/``,
mounted read-only at ``/run/sandgrid-egress``, mode 0700: the agent reaches
it, the sandbox user does not) gets ``inbound.sock``. The sandbox's agent
keeps a few connections dialed to it (``worker.agent.inbound``); one thread
of the node accepts on every listener (a selector) and queues what it
accepts, per sandbox. ``take`` hands out the next one, waiting briefly for
the agent to dial again when all are in use. A connection the agent has
closed meanwhile (it exited) is found out by the caller, whose handshake
fails, and ``connect`` takes the next.

``connect`` sends the stream's first bytes (a request's head) with the port
(``H <port> <n>``): the agent writes them to the port as soon as it is
connected, before its answer, so the server works while the answer travels
back. An agent older than the verb (a sandbox restored with its memory from
an image made before) closes the connection on it: the sandbox is marked, and
its requests name the port alone (``P``) and send the bytes after ``K``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import threading
import time
from collections import deque
from pathlib import Path

from sandgrid.errors import PortUnreachable, SandboxError
from worker.agent.inbound import EARLY_MAX, split_line

__all__ = ["SOCKET_NAME", "InboundSockets"]

SOCKET_NAME = "inbound.sock"
#: The agent's answer, its errno and reason (``worker.agent.inbound.answer_for``).
_MAX_ANSWER = 128


class _Sandbox:
    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.idle: deque[socket.socket] = deque()
        self.ready = threading.Condition()
        #: Its agent closed on an ``H`` request: it knows ``P`` alone.
        self.legacy = False


class InboundSockets:
    """The listeners of this node's sandboxes and their idle agent connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boxes: dict[str, _Sandbox] = {}
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="ports-accept", daemon=True)
        self._thread.start()

    def open(self, name: str, directory: Path) -> None:
        """Listen on ``directory/inbound.sock`` for sandbox ``name``'s agent."""
        path = directory / SOCKET_NAME
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound through the directory's descriptor: a socket's path holds 107 bytes,
        # and a state directory plus a sandbox's name can be longer.
        dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            listener.bind(f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}")
        finally:
            os.close(dir_fd)
        os.chmod(path, 0o600)
        listener.listen(64)
        listener.setblocking(False)
        with self._lock:
            self._boxes[name] = _Sandbox(listener)
            self._sel.register(listener, selectors.EVENT_READ, name)
        self._wake_w.send(b"x")

    def close(self, name: str) -> None:
        """Stop listening for sandbox ``name`` and close its idle connections. Idempotent."""
        with self._lock:
            box = self._boxes.pop(name, None)
            if box is None:
                return
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(box.listener)
        box.listener.close()
        with box.ready:
            while box.idle:
                box.idle.popleft().close()
            box.ready.notify_all()

    def stop(self) -> None:
        """Close every listener and the accepting thread. Idempotent."""
        if self._stopped:
            return
        for name in list(self._boxes):
            self.close(name)
        self._stopped = True
        self._wake_w.send(b"x")
        self._thread.join(5)
        if not self._thread.is_alive():  # its selector and wake pair, now rather than at gc
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()

    def _run(self) -> None:
        while not self._stopped:
            for key, _ in self._sel.select(timeout=1.0):
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                self._accept(key.data, key.fileobj)  # type: ignore[arg-type]

    def _accept(self, name: str, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        box = self._boxes.get(name)
        if box is None:
            conn.close()
            return
        conn.setblocking(True)
        with box.ready:
            box.idle.append(conn)
            box.ready.notify()

    def idle(self, name: str) -> int:
        """How many of sandbox ``name``'s agent connections wait now."""
        box = self._boxes.get(name)
        return len(box.idle) if box is not None else 0

    def _take(self, name: str, deadline: float) -> tuple[socket.socket, _Sandbox]:
        box = self._boxes.get(name)
        if box is None:
            raise SandboxError(f"sandbox {name} has no port listener", operation="ports")
        with box.ready:
            while not box.idle:
                left = deadline - time.monotonic()
                if left <= 0 or name not in self._boxes:
                    raise SandboxError(
                        "the sandbox's agent did not offer a connection in time",
                        operation="ports",
                        retryable=True,
                    )
                box.ready.wait(left)
            return box.idle.popleft(), box

    def connect(
        self, name: str, port: int, timeout: float, early: bytes = b""
    ) -> tuple[socket.socket, bytes]:
        """A connection to ``port`` on sandbox ``name``'s loopback, through its agent,
        ``early`` sent on it; and the port's bytes that came with the agent's answer.

        Raises:
            PortUnreachable: nothing listens there (the agent's connect was refused).
            SandboxError: no agent connection came in time, or the sandbox is gone.
        """
        deadline = time.monotonic() + timeout
        while True:
            conn, box = self._take(name, deadline)
            ahead = not box.legacy and 0 < len(early) <= EARLY_MAX
            try:
                conn.settimeout(max(0.05, deadline - time.monotonic()))
                conn.sendall(_request(port, early if ahead else b""))
                got = split_line(conn, _MAX_ANSWER)
                if got is not None and got[0] == b"K" and early and not ahead:
                    conn.sendall(early)
            except OSError:
                got = None
            if got is not None and got[0] == b"K":
                conn.settimeout(None)
                return conn, got[1]
            conn.close()
            if got is None:  # it died while idle, or an older agent refused the verb
                box.legacy = box.legacy or ahead
                continue
            raise _refusal(port, got[0])


def _request(port: int, early: bytes) -> bytes:
    """The agent's request: the port, and ``early`` when there are any."""
    if early:
        return f"H {port} {len(early)}\n".encode() + early
    return f"P {port}\n".encode()


def _refusal(port: int, answer: bytes) -> PortUnreachable:
    _, _, rest = answer.partition(b" ")
    code, _, reason = rest.decode(errors="replace").partition(" ")
    refused = code == str(errno.ECONNREFUSED)
    message = (
        f"nothing is listening on port {port} in the sandbox"
        if refused
        else f"cannot connect to port {port} in the sandbox: {reason}"
    )
    return PortUnreachable(
        message,
        operation="ports",
        context={"port": port, "reason": "not_listening" if refused else reason},
    )
