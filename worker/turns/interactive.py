"""The worker's side of interactive turns: streamed output and cancel.

``TurnControl`` wraps one exec of a turn (the exec handler, ``worker.ops.exec``, calls it):

- before it runs, a turn that was cancelled already answers ``cancelled``
  without running (the API marks the turn before it tells the worker). An exec
  turn is in the node's table from before its claim (``entered``), and the
  claim's read of the turn record says whether the mark was there
  (``claimed``); a cancel that comes later finds the turn in the table, so a
  warm exec reads no flag of its own (issue 22.1). A turn that restored its
  session after the claim reads the flag once before it runs (``arrived``):
  its cancel task may have gone to no node, the record naming none yet;
- while it runs, it is in the node's table of running turns, so that the
  ``cancel`` task (``worker.tasks.cancel``, on the node's direct queue) finds
  the turn's session, and so its sandbox, and sends the agent a ``cancel``
  notification (``AgentClient.notify``) naming the exec's frame;
- with ``request.stream``, each chunk goes to an ``EventBuffer``: a bounded
  buffer that a thread drains into the turn's Redis Stream
  (``sandgrid.wire.turnstream``), so the channel's pump never waits on Redis;
  when the buffer is full, chunks are dropped and a ``dropped`` event says how
  many bytes, rather than memory growing without bound.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from sandgrid.models import ExecRequest, ExecResult
from sandgrid.wire import turnstream
from worker.agent_client.client import ChunkCallback
from worker.sessions.table import SessionTable

__all__ = ["BUFFER_BYTES", "CANCEL_FIND_S", "EventBuffer", "TurnControl"]

log = logging.getLogger(__name__)

#: Bytes of output a streamed turn may hold in memory before chunks are dropped.
BUFFER_BYTES = 4 << 20
#: How long a cancel waits for its turn's exec request to reach the agent.
CANCEL_FIND_S = 2.0


class EventBuffer:
    """A bounded buffer of one turn's output events, drained to Redis by a thread.

    Args:
        client: the Redis client.
        turn_id: whose stream to append to.
        max_bytes: the bound; beyond it chunks are dropped (and counted).
    """

    def __init__(self, client: redis.Redis[str], turn_id: str, max_bytes: int = BUFFER_BYTES):
        self.client, self.turn_id, self.max_bytes = client, turn_id, max_bytes
        self._events: deque[dict[str, Any]] = deque()
        self._bytes = 0
        self._dropped = 0
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._drain, name="sandgrid-stream", daemon=True)
        self._thread.start()

    def __call__(self, stream: str, text: str) -> None:
        """The channel's ``on_chunk``: queue the chunk, or count it dropped; never waits."""
        size = len(text)
        with self._cond:
            if self._bytes + size > self.max_bytes:
                self._dropped += size
                return
            if self._dropped:
                self._events.append({"type": "dropped", "bytes": self._dropped})
                self._dropped = 0
            self._events.append({"type": stream, "data": text})
            self._bytes += size
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is buffered (and a last ``dropped``), then stop the thread."""
        with self._cond:
            if self._dropped:
                self._events.append({"type": "dropped", "bytes": self._dropped})
                self._dropped = 0
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._events and not self._closed:
                    self._cond.wait()
                if not self._events:
                    return
                batch = list(self._events)
                self._events.clear()
            try:
                turnstream.append(self.client, self.turn_id, batch)
            except redis.RedisError as exc:  # the result still carries the whole output
                log.warning("turn %s: %d events not streamed: %s", self.turn_id, len(batch), exc)
            with self._cond:
                self._bytes -= sum(len(e.get("data", "")) for e in batch)


@dataclass
class TurnControl:
    """The node's running turns, and what can be asked of them while they run.

    Attributes:
        client: Redis (the cancel flags and the turns' streams).
        sessions: the node's session table (a turn's sandbox is its session's).
    """

    client: redis.Redis[str]
    sessions: SessionTable
    _running: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: turns of the table cancelled before their exec started
    _cancelled: set[str] = field(default_factory=set)
    #: turns of the table whose claim read the record after they entered it, with
    #: no restore since: nothing left for the flag to tell
    _seen: set[str] = field(default_factory=set)

    @contextlib.contextmanager
    def entered(self, turn_id: str, session_id: str) -> Iterator[None]:
        """Hold an exec turn in the table from before its claim to its end."""
        with self._lock:
            self._running[turn_id] = session_id
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(turn_id, None)
                self._cancelled.discard(turn_id)
                self._seen.discard(turn_id)

    def claimed(self, turn_id: str, cancelled: bool) -> None:
        """The claim of an entered turn read its record: ``cancelled``, the API's mark."""
        with self._lock:
            (self._cancelled if cancelled else self._seen).add(turn_id)

    def arrived(self, turn_id: str) -> None:
        """The turn restored its session after its claim: its exec reads the flag."""
        with self._lock:
            self._seen.discard(turn_id)

    def exec(
        self,
        run: Callable[[ChunkCallback | None], ExecResult],
        request: ExecRequest,
        turn_id: str,
        session_id: str,
    ) -> ExecResult:
        """Run the exec of ``turn_id`` (``run``, given the chunk callback when
        ``request.stream``): streamed when asked, cancellable by turn id."""
        with self._lock:
            self._running[turn_id] = session_id
            seen = turn_id in self._seen
        buffer = EventBuffer(self.client, turn_id) if request.stream else None
        try:
            if not seen and turnstream.cancel_requested(self.client, turn_id):
                return _not_started()
            with self._lock:
                if turn_id in self._cancelled:
                    return _not_started()
            return run(buffer)
        finally:
            with self._lock:  # ended: a later cancel finds nothing to do
                self._running.pop(turn_id, None)
            if buffer is not None:
                buffer.close()

    def cancel(self, turn_id: str) -> str:
        """Kill the running exec of ``turn_id`` on this node.

        Returns:
            ``"cancelling"`` when the agent was told, ``"not_running"`` when the
            turn is not running an exec here (not started: the flag stops it;
            finished: nothing to do).
        """
        end = time.monotonic() + CANCEL_FIND_S
        with self._lock:
            if turn_id in self._running:  # its exec, if it has not started, will not
                self._cancelled.add(turn_id)
        while time.monotonic() < end:
            with self._lock:
                session_id = self._running.get(turn_id)
            if session_id is None:
                return "not_running"
            local = self.sessions.get(session_id)
            channel = local.sandbox.channel if local is not None else None
            frame = channel.frame_of("exec", turn_id) if channel is not None else None
            if channel is not None and frame is not None:
                channel.notify("cancel", {"target": frame})
                return "cancelling"
            time.sleep(0.005)  # registered, its request not yet written
        return "not_running"


def _not_started() -> ExecResult:
    """The result of a turn cancelled before its exec started (the handler names the node)."""
    return ExecResult(
        exit_code=None,
        stderr="sandgrid: the turn was cancelled before it started\n",
        cancelled=True,
    )
