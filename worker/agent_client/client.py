"""The worker's persistent channel to one sandbox's agent, over a plain byte stream.

One channel per sandbox, opened once when the sandbox is created and kept for
its life: a request is one frame written to the agent's stdin, the reply one
frame read back from its stdout (``docs/agent-protocol.md``). The stream is
the runtime's (``Runtime.attach``: under Docker, the attach stream with its
framing already stripped), so the client is the same on every runtime; no
``docker exec``, no network.

Requests on one channel overlap: a session runs several turns at once, and
the agent answers each request when it is done, in any order, matched by
frame id. The reads are synchronous in the callers' threads (no reader thread
per container): whichever waiting caller holds the read lock reads and hands
each frame to its request, so a lone round trip costs two socket operations
and nothing else. Each request is tagged with the turn it serves
(``TURN_TAG``), so a cancel finds the exec of its turn.

Anything that leaves the byte stream in an unknown state (socket error, EOF,
bad framing, no reply by the deadline) breaks the channel for good: it is
closed and every later request raises ``SandboxLost``. The sandbox is then
lost; the caller destroys it and continues the session elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sandgrid.errors import SandboxLost
from worker.agent_client.framing import FrameDecoder, FrameError, encode_frame, error_from_reply
from worker.runtimes.base import ByteStream

__all__ = ["RECV_SIZE", "TURN_TAG", "AgentClient", "ChunkCallback"]

log = logging.getLogger(__name__)

ChunkCallback = Callable[[str, str], None]
"""Called as ``on_chunk(stream, text)`` for each streamed piece of output."""

RECV_SIZE = 1 << 20

TURN_TAG: ContextVar[str | None] = ContextVar("sandgrid_turn_tag", default=None)
"""The turn the calling thread serves (set by the worker's executor for each turn)."""

#: How long a waiter sleeps before it looks again at the read lock, at most: the
#: reader wakes it sooner when its reply or the lock's release comes.
_HANDOFF_S = 0.05


@dataclass
class _Waiter:
    """One request waiting for its reply: who it is for, and the reply once read."""

    op: str
    tag: str | None
    on_chunk: ChunkCallback | None
    reply: dict[str, Any] | None = None


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
        self._state = threading.Condition()  # the waiters, and a reply's arrival
        self._read_lock = threading.Lock()  # one reader at a time
        self._write_lock = threading.Lock()  # whole frames only: requests and notifications
        self._waiting: dict[int, _Waiter] = {}
        self._ids = itertools.count(1)
        self._frames = FrameDecoder()
        self.broken: str | None = None

    @property
    def alive(self) -> bool:
        return self.broken is None

    def quiet(self) -> bool:
        """Whether the channel is open with nothing to read and nothing in flight.

        One ``poll`` of the stream, no round trip: a container that exits closes
        its stream (readable at EOF by the time ``docker kill`` returns), so an
        idle channel that is not readable still has its agent. The pool's
        cheap proof that a warm sandbox it pinged lately is still there.
        """
        if self.broken is not None or self._waiting:
            return False
        try:
            poller = select.poll()
            poller.register(self._stream.fileno(), select.POLLIN | select.POLLPRI)
            return not poller.poll(0)
        except (OSError, ValueError):  # closed meanwhile
            return False

    @property
    def in_flight(self) -> dict[int, tuple[str, str | None]]:
        """``{frame id: (op, turn tag)}`` of the requests waiting for their replies."""
        with self._state:
            return {fid: (w.op, w.tag) for fid, w in self._waiting.items()}

    def frame_of(self, op: str, tag: str) -> int | None:
        """The frame id of the ``op`` request in flight for turn ``tag``, if any."""
        with self._state:
            for fid, w in self._waiting.items():
                if w.op == op and w.tag == tag:
                    return fid
        return None

    def request(
        self,
        op: str,
        fields: dict[str, Any] | None = None,
        *,
        timeout: float,
        on_chunk: ChunkCallback | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its reply (other requests may be in flight).

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
        waiter = _Waiter(op, TURN_TAG.get(), on_chunk)
        with self._state:
            if self.broken is not None:
                raise self._lost(op, self.broken)
            self._waiting[frame_id] = waiter
        try:
            with self._write_lock:
                self._stream.sendall(data)
            reply = self._await(waiter, time.monotonic() + timeout)
        except (OSError, FrameError) as exc:
            reason = "no reply in time" if isinstance(exc, TimeoutError) else str(exc)
            self._break(f"{op}: {reason or type(exc).__name__}")
            raise self._lost(op, self.broken or reason) from exc
        finally:
            with self._state:
                self._waiting.pop(frame_id, None)
        if not reply.get("ok"):
            raise error_from_reply(op, reply.get("error") or {})
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    def notify(self, op: str, fields: dict[str, Any] | None = None) -> None:
        """Write one request frame that expects no reply (``"notify": true``).

        Allowed while requests are in flight (a ``cancel`` of one of them, a
        terminal's input to its ``pty``): it takes only the write lock, so
        frames never interleave, and never reads.

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
        self._break("closed")

    # ---- internals ---------------------------------------------------------

    def _await(self, waiter: _Waiter, deadline: float) -> dict[str, Any]:
        """Wait for ``waiter``'s reply, reading the stream whenever no one else is.

        No reader thread: the waiter that finds the read lock free reads and
        hands each frame to its request (a chunk to its callback, a reply to
        its waiter), until its own reply comes; then a waiter still waiting
        takes over. One request alone costs what it did before requests could
        overlap: its own reads, nothing else.
        """
        while True:
            if waiter.reply is not None:
                return waiter.reply
            if self.broken is not None:
                raise ConnectionResetError(self.broken)
            if self._read_lock.acquire(blocking=False):
                try:
                    if waiter.reply is None:
                        self._read_once(deadline)
                finally:
                    self._read_lock.release()
                    with self._state:
                        self._state.notify_all()
                continue
            with self._state:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no reply in time")
                if waiter.reply is None and self.broken is None:
                    self._state.wait(min(left, _HANDOFF_S))

    def _read_once(self, deadline: float) -> None:
        """One read from the stream; every whole frame in it goes where it belongs."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no reply in time")
        self._stream.settimeout(remaining)
        data = self._stream.recv(RECV_SIZE)
        if not data:
            raise ConnectionResetError("the agent closed the channel (container exited?)")
        for frame in self._frames.feed(data):
            self._deliver(frame)

    def _deliver(self, frame: dict[str, Any]) -> None:
        with self._state:
            waiter = self._waiting.get(frame.get("id"))  # type: ignore[arg-type]
            if waiter is not None and frame.get("event") != "chunk":
                waiter.reply = frame
                self._state.notify_all()
                return
        if waiter is None:
            log.warning("sandbox %s: dropping stale frame %r", self.name, frame.get("id"))
        else:
            self._chunk(frame, waiter.on_chunk)

    def _chunk(self, frame: dict[str, Any], on_chunk: ChunkCallback | None) -> None:
        if on_chunk is None:
            return
        try:
            on_chunk(str(frame.get("stream", "stdout")), str(frame.get("data", "")))
        except Exception:  # a consumer's bug must not break the channel
            log.exception("sandbox %s: chunk callback failed", self.name)

    def _break(self, reason: str) -> None:
        with self._state:
            first = self.broken is None
            if first:
                self.broken = reason
            self._state.notify_all()
        if first:
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
