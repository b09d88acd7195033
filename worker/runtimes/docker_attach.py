"""Docker's attach stream as a plain byte stream to the agent: its framing, stripped.

Docker wraps what a container without a TTY writes to stdout and stderr in its
own 8-byte headers (stream id, 3 zero bytes, 4-byte big-endian length).
``AttachDemux`` strips them, incrementally (bytes arrive split anywhere);
``AttachStream`` is the ``ByteStream`` the Docker runtimes hand to the agent
client: the agent's stdout bytes only, its stderr logged under the sandbox's
name. Pure code over a socket, no Docker SDK, so it is unit-tested without it.
"""

from __future__ import annotations

import logging
import socket
import struct
import time

__all__ = ["STDERR", "STDOUT", "AttachDemux", "AttachError", "AttachStream", "attach_params"]

log = logging.getLogger(__name__)

STDOUT = 1
STDERR = 2
_HEADER = struct.Struct(">BxxxI")


class AttachError(ConnectionError):
    """The attach stream is not Docker's framing: the channel cannot be trusted any more."""


def attach_params() -> dict[str, int]:
    """Query parameters of the Docker attach call: all three streams, no logs replay."""
    return {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}


class AttachDemux:
    """Split Docker's multiplexed attach stream into (stream id, payload) pieces."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add bytes; return the complete pieces, in order, by stream id."""
        self._buf += data
        out: list[tuple[int, bytes]] = []
        while len(self._buf) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self._buf)
            if stream not in (0, STDOUT, STDERR):
                raise AttachError(f"bad Docker stream header: stream id {stream}")
            end = _HEADER.size + size
            if len(self._buf) < end:
                break
            out.append((stream, bytes(self._buf[_HEADER.size : end])))
            del self._buf[:end]
        return out


class AttachStream:
    """The agent's stdin and stdout over one hijacked attach connection.

    Args:
        sock: the raw socket of the attach connection (for the Docker SDK's
            ``attach_socket`` on a unix socket that is ``result._sock``).
        name: the sandbox's name, for the agent's stderr lines in the log.
    """

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.name = name
        self._sock = sock
        self._timeout: float | None = None
        self._demux = AttachDemux()
        self._stdout: list[bytes] = []  # payloads not handed out yet
        self._stderr = bytearray()

    def settimeout(self, value: float | None, /) -> None:
        """The timeout of the next ``recv`` as a whole (and of writes)."""
        self._timeout = value
        self._sock.settimeout(value)

    def sendall(self, data: bytes, /) -> None:
        """Write to the agent's stdin (Docker does not frame that direction)."""
        self._sock.sendall(data)

    def recv(self, bufsize: int, /) -> bytes:
        """Up to ``bufsize`` bytes of the agent's stdout; ``b""`` at EOF.

        Reads on through pieces of stderr (logged) until stdout bytes come, but
        never past the timeout set last: then ``TimeoutError``.
        """
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while not self._stdout:
            if deadline is not None:
                self._sock.settimeout(_until(deadline))
            if not self._pump(bufsize):
                return b""
        out = b"".join(self._stdout)  # one payload: no copy
        self._stdout.clear()
        if len(out) > bufsize:
            out, rest = out[:bufsize], out[bufsize:]
            self._stdout.append(rest)
        return out

    def shutdown(self, how: int, /) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    def _pump(self, bufsize: int) -> bool:
        """One read of the socket, sorted by stream; False at EOF."""
        data = self._sock.recv(bufsize)
        for stream, payload in self._demux.feed(data):
            if stream == STDOUT and payload:
                self._stdout.append(payload)
            elif stream == STDERR:
                self._log_stderr(payload)
        return bool(data)

    def _log_stderr(self, payload: bytes) -> None:
        self._stderr += payload
        *lines, rest = self._stderr.split(b"\n")
        self._stderr = bytearray(rest[-4096:])
        for line in lines:
            log.warning("sandbox %s agent: %s", self.name, line.decode(errors="replace"))


def _until(deadline: float) -> float:
    """Seconds left to ``deadline`` (``time.monotonic``); ``TimeoutError`` once past."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no reply in time")
    return left
