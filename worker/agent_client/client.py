"""The worker's persistent channel to one sandbox's agent, over a plain byte stream.

One channel per sandbox, opened once when the sandbox is created and kept for
its life: a request is one frame written to the agent's stdin, the reply one
frame read back from its stdout (``docs/agent-protocol.md``). The stream is
the runtime's (``Runtime.attach``: under Docker, the attach stream with its
framing already stripped), so the client is the same on every runtime; no
``docker exec``, no network.

Requests on one channel are serialised by a lock: the agent answers one
request at a time anyway, and a turn of a session never overlaps another. The
read is synchronous in the caller's thread (no reader thread per container), so
a round trip costs two socket operations and nothing else.

Anything that leaves the byte stream in an unknown state (socket error, EOF,
bad framing, no reply by the deadline) breaks the channel for good: it is
closed and every later request raises ``SandboxLost``. The sandbox is then
lost; the caller destroys it and continues the session elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sandgrid.errors import SandboxLost
from worker.agent_client.framing import FrameDecoder, FrameError, encode_frame, error_from_reply
from worker.runtimes.base import ByteStream

__all__ = ["RECV_SIZE", "AgentClient", "ChunkCallback"]

log = logging.getLogger(__name__)

ChunkCallback = Callable[[str, str], None]
"""Called as ``on_chunk(stream, text)`` for each streamed piece of output."""

RECV_SIZE = 1 << 20


class AgentClient:
    """Request/response with one sandbox's agent over its stdin and stdout.

    Args:
        stream: the byte stream to the agent (``Runtime.attach``; any connected
            socket is one).
        name: the sandbox's name, for logs and error context.
    """

    def __init__(self, stream: ByteStream, name: str) -> None:
        self.name = name
        self._stream = stream
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # whole frames only: requests and notifications
        #: ``(op, frame id)`` of the request waiting for its reply, if any.
        self.in_flight: tuple[str, int] | None = None
        self._ids = itertools.count(1)
        self._frames = FrameDecoder()
        self._ready: deque[dict[str, Any]] = deque()
        self.broken: str | None = None

    @property
    def alive(self) -> bool:
        return self.broken is None

    def request(
        self,
        op: str,
        fields: dict[str, Any] | None = None,
        *,
        timeout: float,
        on_chunk: ChunkCallback | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its reply.

        Args:
            op: the agent operation.
            fields: the request's other fields.
            timeout: seconds to wait for the reply before the channel is given up.
            on_chunk: receives streamed output frames of this request.

        Returns:
            The reply's ``result`` object.

        Raises:
            SandboxLost: the channel broke or the agent did not answer in time.
            InvalidInput: the agent refused the request as bad input (path
                outside the workspace, payload too large...); channel intact.
            SandboxError: the agent failed to do the operation; channel intact.
        """
        frame_id = next(self._ids)
        data = encode_frame({"id": frame_id, "op": op, **(fields or {})})
        with self._lock:
            if self.broken is not None:
                raise self._lost(op, self.broken)
            self.in_flight = (op, frame_id)
            try:
                reply = self._round_trip(data, frame_id, time.monotonic() + timeout, on_chunk)
            except (OSError, FrameError) as exc:
                reason = "no reply in time" if isinstance(exc, TimeoutError) else str(exc)
                self._break(f"{op}: {reason or type(exc).__name__}")
                raise self._lost(op, self.broken or reason) from exc
            finally:
                self.in_flight = None
        if not reply.get("ok"):
            raise error_from_reply(op, reply.get("error") or {})
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, op: str, fields: dict[str, Any] | None = None) -> None:
        """Write one request frame that expects no reply (``"notify": true``).

        Allowed while another request is in flight (a ``cancel`` of that very
        request, or a terminal's input to its ``pty``): it takes only the write
        lock, so frames never interleave, and never reads.

        Raises:
            SandboxLost: the channel is broken, or broke while writing.
        """
        data = encode_frame({"op": op, "notify": True, **(fields or {})})
        with self._write_lock:
            if self.broken is not None:
                raise self._lost(op, self.broken)
            try:
                self._stream.sendall(data)
            except OSError as exc:
                self._break(f"{op}: {exc or type(exc).__name__}")
                raise self._lost(op, self.broken or str(exc)) from exc

    def close(self) -> None:
        """Close the stream; the agent sees EOF on stdin and exits."""
        with self._lock:
            self._break("closed")

    # ---- internals ---------------------------------------------------------

    def _round_trip(
        self, data: bytes, frame_id: int, deadline: float, on_chunk: ChunkCallback | None
    ) -> dict[str, Any]:
        self._stream.settimeout(max(deadline - time.monotonic(), 0.001))
        with self._write_lock:
            self._stream.sendall(data)
        while True:
            while self._ready:
                frame = self._ready.popleft()
                if frame.get("id") != frame_id:
                    log.warning("sandbox %s: dropping stale frame %r", self.name, frame.get("id"))
                elif frame.get("event") == "chunk":
                    self._chunk(frame, on_chunk)
                else:
                    return frame
            self._receive(deadline)

    def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no reply in time")
        self._stream.settimeout(remaining)
        data = self._stream.recv(RECV_SIZE)
        if not data:
            raise ConnectionResetError("the agent closed the channel (container exited?)")
        self._ready.extend(self._frames.feed(data))

    def _chunk(self, frame: dict[str, Any], on_chunk: ChunkCallback | None) -> None:
        if on_chunk is None:
            return
        try:
            on_chunk(str(frame.get("stream", "stdout")), str(frame.get("data", "")))
        except Exception:  # a consumer's bug must not break the channel
            log.exception("sandbox %s: chunk callback failed", self.name)

    def _break(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason
            log.info("sandbox %s: channel closed (%s)", self.name, reason)
        with contextlib.suppress(OSError):
            self._stream.shutdown(socket.SHUT_RDWR)
        self._stream.close()

    def _lost(self, op: str, reason: str) -> SandboxLost:
        return SandboxLost(
            f"the channel to sandbox {self.name} is gone: {reason}",
            operation=op,
            context={"sandbox": self.name, "reason": reason},
        )
