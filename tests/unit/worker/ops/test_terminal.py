"""The worker's terminal bridge and ``AgentClient.notify``, with a fake agent and real Redis."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
import redis

from sandgrid.errors import SandboxLost
from sandgrid.ops.terminal import PtyOp
from sandgrid.wire import names
from worker.agent_client.client import AgentClient
from worker.agent_client.framing import FrameDecoder
from worker.ops.terminal import OUT_MAXLEN, STREAM_TTL_S, TerminalBridge, agent_control


def test_notify_frames_never_interleave() -> None:
    ours, theirs = socket.socketpair()
    channel = AgentClient(ours, "fake")
    got: list[dict[str, Any]] = []
    frames = FrameDecoder()

    def read() -> None:
        while len(got) < 8 * 200:
            got.extend(frames.feed(theirs.recv(1 << 16)))

    reader = threading.Thread(target=read)
    reader.start()
    payload = "x" * 5000  # several socket writes per frame
    senders = [
        threading.Thread(
            target=lambda n=n: [
                channel.notify("pty_input", {"n": n, "d": payload}) for _ in range(200)
            ]
        )
        for n in range(8)
    ]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    reader.join(10)
    assert len(got) == 1600 and all(f["op"] == "pty_input" and f["d"] == payload for f in got)
    assert all(f["notify"] is True and "id" not in f for f in got)  # never answered
    assert sorted(f["n"] for f in got) == sorted(n for n in range(8) for _ in range(200))
    channel.close()
    with pytest.raises(SandboxLost):
        channel.notify("pty_close")
    theirs.close()


def test_agent_control_entries() -> None:
    assert agent_control({"t": "stdin", "d": "é\r"}) == ("pty_input", {"data_b64": "w6kN"})
    assert agent_control({"t": "resize", "rows": "5", "cols": "7"}) == (
        "pty_resize",
        {"rows": 5, "cols": 7},
    )
    assert agent_control({"t": "close"}) == ("pty_close", {})
    assert agent_control({"t": "bogus"}) is None


class _FakeChannel:
    def __init__(self) -> None:
        self.notified: list[tuple[str, dict[str, Any]]] = []

    def notify(self, op: str, fields: dict[str, Any] | None = None) -> None:
        self.notified.append((op, fields or {}))


class _FakeSandbox:
    name = "fake"

    def __init__(self) -> None:
        self.channel = _FakeChannel()


class _FakeBackend:
    """Answers ``pty`` after emitting ``chunks`` chunks, or once a close was notified."""

    def __init__(self, chunks: int = 0) -> None:
        self.chunks = chunks
        self.fields: dict[str, Any] = {}

    def call(self, sbx: Any, op: str, fields: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.fields = fields
        for i in range(self.chunks):
            kw["on_chunk"]("stdout", f"line {i}\n")
        end = time.monotonic() + 10
        while not self.chunks and ("pty_close", {}) not in sbx.channel.notified:
            assert time.monotonic() < end, sbx.channel.notified
            time.sleep(0.01)
        return {
            "exit_code": 0 if self.chunks else None,
            "reason": "exited" if self.chunks else "closed",
        }


def test_output_stream_is_bounded_and_expires(redis_client: redis.Redis[str]) -> None:
    op = PtyOp(pty_id="t-bounded-1", idle_s=5, max_s=10)
    result = TerminalBridge(redis_client).run(
        _FakeBackend(chunks=3 * OUT_MAXLEN), _FakeSandbox(), op
    )  # type: ignore[arg-type]
    key = names.pty_out_key(op.pty_id)
    assert result.exit_code == 0
    assert OUT_MAXLEN <= redis_client.xlen(key) < OUT_MAXLEN + 200  # trimmed, not 3x
    _, last = redis_client.xrevrange(key, count=1)[0]
    assert last == {"t": "exit", "code": "0", "reason": "exited"}
    assert 0 < redis_client.ttl(key) <= STREAM_TTL_S


def test_input_stream_reaches_the_agent(redis_client: redis.Redis[str]) -> None:
    op = PtyOp(pty_id="t-input-1", rows=10, cols=20, idle_s=5, max_s=10)
    in_key = names.pty_in_key(op.pty_id)
    redis_client.xadd(in_key, {"t": "stdin", "d": "ls\r"})
    redis_client.xadd(in_key, {"t": "resize", "rows": "30", "cols": "90"})
    redis_client.xadd(in_key, {"t": "close"})
    sbx, backend = _FakeSandbox(), _FakeBackend()
    result = TerminalBridge(redis_client).run(backend, sbx, op)  # type: ignore[arg-type]
    assert result.reason == "closed"
    assert backend.fields == {
        "rows": 10,
        "cols": 20,
        "term": "xterm-256color",
        "idle_s": 5,
        "max_s": 10,
    }
    assert sbx.channel.notified == [
        ("pty_input", {"data_b64": "bHMN"}),
        ("pty_resize", {"rows": 30, "cols": 90}),
        ("pty_close", {}),
    ]
    _, last = redis_client.xrevrange(names.pty_out_key(op.pty_id), count=1)[0]
    assert last == {"t": "exit", "code": "", "reason": "closed"}
