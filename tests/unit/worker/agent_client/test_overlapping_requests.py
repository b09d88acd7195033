"""Requests that overlap on one channel: each gets its own reply and its own chunks."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sandgrid.errors import SandboxLost
from worker.agent_client.client import TURN_TAG, AgentClient
from worker.agent_client.framing import FrameDecoder, encode_frame


class _Agent:
    """An agent on the far end of a socket pair that holds each request until told."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.requests: list[dict[str, object]] = []
        self.arrived = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        frames = FrameDecoder()
        while data := self.sock.recv(65536):
            with self.arrived:
                self.requests.extend(frames.feed(data))
                self.arrived.notify_all()

    def wait_for(self, n: int) -> list[dict[str, object]]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= n, 5)
            return list(self.requests)

    def send(self, frame: dict[str, object]) -> None:
        self.sock.sendall(encode_frame(frame))


@pytest.fixture
def pair() -> Iterator[tuple[AgentClient, _Agent]]:
    ours, theirs = socket.socketpair()
    client = AgentClient(ours, "sbx-test")
    yield client, _Agent(theirs)
    client.close()
    theirs.close()


def _call(client: AgentClient, op: str, out: dict[str, object], tag: str | None = None) -> None:
    chunks: list[str] = []
    TURN_TAG.set(tag)
    out[op] = client.request(op, {}, timeout=5, on_chunk=lambda _s, text: chunks.append(text))
    out[op + ".chunks"] = chunks


def test_replies_in_any_order_reach_their_own_callers(pair: tuple[AgentClient, _Agent]) -> None:
    client, agent = pair
    out: dict[str, object] = {}
    threads = [threading.Thread(target=_call, args=(client, op, out)) for op in ("a", "b", "c")]
    for t in threads:
        t.start()
    ids = {str(r["op"]): r["id"] for r in agent.wait_for(3)}
    agent.send({"id": ids["b"], "event": "chunk", "stream": "stdout", "data": "b1"})
    agent.send({"id": ids["c"], "ok": True, "result": {"who": "c"}})
    agent.send({"id": ids["a"], "event": "chunk", "stream": "stdout", "data": "a1"})
    agent.send({"id": ids["b"], "ok": True, "result": {"who": "b"}})
    agent.send({"id": ids["a"], "ok": True, "result": {"who": "a"}})
    for t in threads:
        t.join(5)
    assert out == {
        "a": {"who": "a"},
        "a.chunks": ["a1"],
        "b": {"who": "b"},
        "b.chunks": ["b1"],
        "c": {"who": "c"},
        "c.chunks": [],
    }
    assert client.alive and client.in_flight == {}


def test_a_short_request_answers_while_a_long_one_waits(pair: tuple[AgentClient, _Agent]) -> None:
    client, agent = pair
    out: dict[str, object] = {}
    long = threading.Thread(target=_call, args=(client, "long", out, "turn-1"))
    long.start()
    first = agent.wait_for(1)[0]
    assert client.frame_of("long", "turn-1") == first["id"]
    short = threading.Thread(target=_call, args=(client, "short", out, "turn-2"))
    short.start()
    second = agent.wait_for(2)[1]
    agent.send({"id": second["id"], "ok": True, "result": {}})
    short.join(5)
    assert "short" in out and "long" not in out
    agent.send({"id": first["id"], "ok": True, "result": {"done": True}})
    long.join(5)
    assert out["long"] == {"done": True}


def test_no_reply_in_time_breaks_the_channel_for_everyone(pair: tuple[AgentClient, _Agent]) -> None:
    client, agent = pair
    errors: list[BaseException] = []

    def patient() -> None:
        try:
            client.request("patient", {}, timeout=5)
        except SandboxLost as exc:
            errors.append(exc)

    t = threading.Thread(target=patient)
    t.start()
    agent.wait_for(1)
    start = time.monotonic()
    with pytest.raises(SandboxLost):
        client.request("hasty", {}, timeout=0.2)
    t.join(5)
    assert len(errors) == 1 and not client.alive
    assert time.monotonic() - start < 4  # the patient one did not wait out its own deadline
    assert json.loads(json.dumps(client.broken))
