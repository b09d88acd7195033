"""The worker's side of interactive turns, without a sandbox: the bounded event
buffer, cancel before start, the agent's control frames, ``AgentClient.notify``."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from typing import Any

import redis

from sandgrid.models import ExecRequest, ExecResult
from sandgrid.wire import turnstream
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded
from worker.agent.control import Control
from worker.agent_client.client import AgentClient
from worker.sessions.table import SessionTable
from worker.turns import interactive
from worker.turns.interactive import EventBuffer, TurnControl


def _events(client: redis.Redis[str], turn_id: str) -> list[dict[str, Any]]:
    return [e.event for e in turnstream.read(client, turn_id, "0").entries]


def test_buffer_streams_chunks_in_order(redis_client: redis.Redis[str]) -> None:
    buf = EventBuffer(redis_client, "tb1")
    for i in range(100):
        buf("stdout" if i % 2 else "stderr", str(i))
    buf.close()
    assert [e["data"] for e in _events(redis_client, "tb1")] == [str(i) for i in range(100)]


def test_a_full_buffer_drops_and_says_how_much(redis_client: redis.Redis[str]) -> None:
    buf = EventBuffer(redis_client, "tb2", max_bytes=10)
    with buf._cond:  # hold the drain: the buffer fills as under a slow Redis
        for _ in range(5):
            buf("stdout", "abcd")
    buf.close()
    events = _events(redis_client, "tb2")
    kept = "".join(e.get("data", "") for e in events)
    dropped = sum(e.get("bytes", 0) for e in events if e["type"] == "dropped")
    assert kept == "abcd" * 2 and dropped == 12  # bounded, and nothing lost unflagged


class _Backend:
    node = "n1"

    def __init__(self) -> None:
        self.ran = 0

    def exec(self, sbx: Any, request: ExecRequest, on_chunk: Any = None) -> ExecResult:
        self.ran += 1
        return ExecResult(exit_code=0, node=self.node)


def test_a_turn_cancelled_before_it_starts_never_runs(redis_client: redis.Redis[str]) -> None:
    control = TurnControl(redis_client, SessionTable())
    backend = _Backend()
    turnstream.request_cancel(redis_client, "tc1")
    request = ExecRequest(shell="true")

    def run(on_chunk: Any) -> ExecResult:
        return backend.exec(object(), request, on_chunk)

    r = control.exec(run, request, "tc1", "s1")
    assert r.cancelled and r.exit_code is None and backend.ran == 0
    ok = control.exec(run, request, "tc2", "s1")
    assert not ok.cancelled and backend.ran == 1
    assert control.cancel("tc2") == "not_running"  # finished: nothing to do


def _runner(backend: _Backend, request: ExecRequest) -> Any:
    def run(on_chunk: Any) -> ExecResult:
        return backend.exec(object(), request, on_chunk)

    return run


def test_a_warm_exec_whose_claim_read_its_record_reads_no_flag(
    redis_client: redis.Redis[str],
) -> None:
    """Issue 22.1: the claim's read of the turn record said whether it was cancelled,
    and a later cancel finds the turn in the table: no EXISTS of the flag."""
    control, backend = TurnControl(redis_client, SessionTable()), _Backend()
    request = ExecRequest(shell="true")
    control.exec(_runner(backend, request), request, "tw0", "s1")  # connections up
    with recorded(TEST_REDIS_URL) as seen, control.entered("tw1", "s1"):
        control.claimed("tw1", cancelled=False)
        r = control.exec(_runner(backend, request), request, "tw1", "s1")
    assert not r.cancelled and backend.ran == 2
    assert names_of(seen) == []
    with control.entered("tw2", "s1"):
        control.claimed("tw2", cancelled=True)  # the record carried the API's mark
        assert control.exec(_runner(backend, request), request, "tw2", "s1").cancelled
    assert backend.ran == 2


def test_a_cancel_between_the_claim_and_the_exec_stops_it(
    redis_client: redis.Redis[str], monkeypatch: Any
) -> None:
    monkeypatch.setattr(interactive, "CANCEL_FIND_S", 0.05)
    control, backend = TurnControl(redis_client, SessionTable()), _Backend()
    request = ExecRequest(shell="true")
    with control.entered("tw3", "s1"):
        control.claimed("tw3", cancelled=False)
        assert control.cancel("tw3") == "not_running"  # no exec yet: the table stops it
        r = control.exec(_runner(backend, request), request, "tw3", "s1")
    assert r.cancelled and backend.ran == 0
    assert control.cancel("tw3") == "not_running" and not control._cancelled


def test_an_exec_that_restored_after_its_claim_reads_the_flag(
    redis_client: redis.Redis[str],
) -> None:
    """Its cancel task may have gone to no node: the record named none yet."""
    control, backend = TurnControl(redis_client, SessionTable()), _Backend()
    request = ExecRequest(shell="true")
    with control.entered("tw4", "s1"):
        control.claimed("tw4", cancelled=False)
        turnstream.request_cancel(redis_client, "tw4")  # marked after the claim read
        control.arrived("tw4")
        assert control.exec(_runner(backend, request), request, "tw4", "s1").cancelled
    assert backend.ran == 0


def test_agent_control_takes_only_a_cancel_of_its_own_request() -> None:
    control = Control(7)
    control.on_frame({"op": "cancel", "target": 8, "notify": True})
    assert not control.cancelled
    control.on_frame({"op": "cancel", "target": 7, "notify": True})
    assert control.cancelled and not control.eof
    control.on_frame(None)
    assert control.eof


def _frames(data: bytes) -> list[dict[str, Any]]:
    out = []
    while data:
        (n,) = struct.unpack(">I", data[:4])
        out.append(json.loads(data[4 : 4 + n]))
        data = data[4 + n :]
    return out


def test_notify_writes_whole_frames_while_a_request_waits() -> None:
    ours, agent = socket.socketpair()
    channel = AgentClient(ours, "sbx")
    waiting = threading.Thread(
        target=lambda: _swallow(channel),
        daemon=True,
    )
    waiting.start()
    received = b""
    while len(_frames(received) if received else []) < 1:
        received += agent.recv(1 << 16)
    assert [op for op, _ in channel.in_flight.values()] == ["exec"]
    for i in range(50):
        channel.notify("cancel", {"target": i})
    agent.settimeout(2)
    while len(_frames(received)) < 51:
        received += agent.recv(1 << 16)
    frames = _frames(received)
    assert frames[0]["op"] == "exec" and "notify" not in frames[0]
    assert [f["target"] for f in frames[1:]] == list(range(50))
    assert all(f["notify"] is True and "id" not in f for f in frames[1:])
    channel.close()
    agent.close()


def _swallow(channel: AgentClient) -> None:
    with contextlib.suppress(Exception):
        channel.request("exec", {"argv": ["sleep"]}, timeout=5)
