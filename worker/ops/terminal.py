"""The worker's side of a terminal turn: the agent's ``pty`` op bridged to Redis Streams.

A ``PtyOp`` is one long turn of its session on the node that holds it. The
handler hands it to ``TerminalBridge.run``, which sends the agent's ``pty``
request and, for as long as it runs:

- appends each output chunk to ``names.pty_out_key(turn)``, a stream capped at
  ``OUT_MAXLEN`` entries (the oldest are trimmed when no reader keeps up) and
  expiring ``STREAM_TTL_S`` after its last write; its last entry is the exit;
- reads ``names.pty_in_key(turn)`` in a thread (``XREAD BLOCK``) and forwards
  each entry to the agent as a notification on the channel
  (``AgentClient.notify``), which is allowed while the ``pty`` request is in flight.

The API never talks to the worker directly: both ends meet on the two streams,
so the socket can be served by any API process.

Configured by the grid's settings (``SANDGRID_REDIS_URL``); the limits of a
terminal (idle and absolute time) are the op's own, enforced by the agent.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from typing import Any

import redis

from sandgrid.errors import SandboxError, SandgridError
from sandgrid.ops.terminal import PtyOp, PtyResult
from sandgrid.wire import names, redis_connect
from sandgrid.wire.settings import Settings
from worker.agent_client.client import TURN_TAG, AgentClient
from worker.ops.base import SandboxContext, SandboxHandler
from worker.sandboxes import Sandbox, SandboxManager
from worker.sandboxes.manager import DEADLINE_MARGIN_S

__all__ = [
    "HANDLERS",
    "IN_BLOCK_MS",
    "OUT_MAXLEN",
    "STREAM_TTL_S",
    "TerminalBridge",
    "agent_control",
    "pty_result",
]

log = logging.getLogger(__name__)

OUT_MAXLEN = 4096
"""Entries kept in a terminal's output stream (and input stream)."""
STREAM_TTL_S = 300
"""Seconds a terminal's streams outlive their last write."""
IN_BLOCK_MS = 500
"""How long one read of the input stream blocks; the input thread's stop latency."""
_REPLY_MARGIN_S = DEADLINE_MARGIN_S + 5.0
_FIND_REQUEST_S = 5.0  # the pty request is written right after its input thread starts


def agent_control(entry: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    """The agent notification for one input-stream entry (None for an unknown one)."""
    kind = entry.get("t")
    if kind == "stdin":
        data = base64.b64encode(entry.get("d", "").encode()).decode()
        return "pty_input", {"data_b64": data}
    if kind == "resize":
        return "pty_resize", {"rows": int(entry["rows"]), "cols": int(entry["cols"])}
    if kind == "close":
        return "pty_close", {}
    return None


class TerminalBridge:
    """Runs terminal turns on this node.

    Args:
        client: Redis (``decode_responses=True``), where the streams live.
    """

    def __init__(self, client: redis.Redis[str]) -> None:
        self.redis = client

    @classmethod
    def from_settings(cls, settings: Settings) -> TerminalBridge:
        """A bridge on its own connection pool to the grid's Redis."""
        return cls(redis_connect.connect(settings.redis_url, decode_responses=True))

    def run(self, backend: SandboxManager, sbx: Sandbox, op: PtyOp) -> PtyResult:
        """Serve one terminal until the agent answers; the turn's result.

        Raises:
            SandboxLost: the channel broke (the sandbox is lost).
            SandboxError: the agent could not start the shell.
        """
        if sbx.channel is None:
            raise SandboxError(f"sandbox {sbx.name} has no channel", operation="pty")
        out_key = names.pty_out_key(op.pty_id)
        stop = threading.Event()
        pump = threading.Thread(
            target=self._input,
            args=(sbx, op.pty_id, stop, TURN_TAG.get()),
            name="sandgrid-pty-in",
            daemon=True,
        )
        fields = {"rows": op.rows, "cols": op.cols, "term": op.term}
        fields.update(idle_s=op.idle_s, max_s=op.max_s)
        pump.start()
        result: dict[str, Any] = {"exit_code": None, "reason": "error"}
        try:
            result = backend.call(
                sbx,
                "pty",
                fields,
                timeout=op.max_s + _REPLY_MARGIN_S,
                on_chunk=lambda _stream, text: self._append(out_key, {"t": "out", "d": text}),
            )
            return pty_result(result)
        except SandboxError as exc:
            result = {"exit_code": None, "reason": "error", "message": exc.message}
            raise
        finally:
            stop.set()
            self._append(out_key, _exit_entry(result))
            pump.join(IN_BLOCK_MS / 1000 * 4)

    def _append(self, key: str, entry: dict[str, str]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(key, entry, maxlen=OUT_MAXLEN, approximate=True)
        pipe.expire(key, STREAM_TTL_S)
        pipe.execute()

    def _input(self, sbx: Sandbox, pty_id: str, stop: threading.Event, turn: str | None) -> None:
        """Forward the input stream to the agent until ``stop``, or a close entry.

        Each notification names the ``pty`` request of this turn (``target``): a
        session may have several terminals open at once (parallel turns)."""
        key, last = names.pty_in_key(pty_id), "0-0"
        channel = sbx.channel
        assert channel is not None
        target: int | None = None
        while not stop.is_set():
            try:
                got = self.redis.xread({key: last}, count=64, block=IN_BLOCK_MS)
            except redis.RedisError:
                log.warning("terminal %s: cannot read its input stream", pty_id, exc_info=True)
                stop.wait(IN_BLOCK_MS / 1000)
                continue
            for _key, entries in got or []:
                for entry_id, entry in entries:
                    last = entry_id
                    control = agent_control(entry)
                    if control is None or stop.is_set():
                        continue
                    target = target or _request_of(channel, turn, stop)
                    op, fields = control
                    try:
                        channel.notify(op, {**fields, "target": target} if target else fields)
                    except SandboxError:
                        return  # the channel broke: the pty request fails too


def _request_of(channel: AgentClient, turn: str | None, stop: threading.Event) -> int | None:
    """The frame id of this turn's ``pty`` request, once it is written (None: the
    turn is unknown, or the terminal ended first; the agent then takes the newest)."""
    if turn is None:
        return None
    deadline = time.monotonic() + _FIND_REQUEST_S
    while not stop.is_set() and time.monotonic() < deadline:
        frame = channel.frame_of("pty", turn)
        if frame is not None:
            return frame
        stop.wait(0.005)
    return None


def pty_result(reply: dict[str, Any]) -> PtyResult:
    """The ``PtyResult`` of the agent's ``pty`` reply (unknown keys are ignored).

    Raises:
        SandboxError: the reply does not fit the model.
    """
    known = {k: reply[k] for k in PtyResult.model_fields if k in reply and k != "kind"}
    try:
        return PtyResult(**known)
    except ValueError as exc:
        raise SandboxError(f"malformed pty reply from the agent: {exc}", operation="pty") from None


def _exit_entry(result: dict[str, Any]) -> dict[str, str]:
    code = result.get("exit_code")
    entry = {"t": "exit", "code": "" if code is None else str(code)}
    entry["reason"] = str(result.get("reason") or "exited")
    if result.get("message"):
        entry["message"] = str(result["message"])
    return entry


def _pty(ctx: SandboxContext, op: PtyOp) -> PtyResult:
    """A terminal turn, on a node that has the bridge (its Redis)."""
    if ctx.parts.terminal is None:
        raise SandgridError(f"unknown op {op!r}", operation="pty")
    return ctx.parts.terminal.run(ctx.backend, ctx.sandbox, op)


HANDLERS = (SandboxHandler(PtyOp, _pty, mutates=True),)
"""The terminal family's handlers."""
