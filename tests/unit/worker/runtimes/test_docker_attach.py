"""Docker's attach stream as the agent client's byte stream: its framing stripped.

Pure code over a socket pair, no Docker.
"""

from __future__ import annotations

import logging
import socket
import struct

import pytest

from worker.agent_client.client import AgentClient
from worker.agent_client.framing import FrameDecoder, encode_frame
from worker.runtimes.docker_attach import STDERR, STDOUT, AttachDemux, AttachError, AttachStream


def docker_piece(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def test_demux_splits_streams_across_reads() -> None:
    data = docker_piece(STDOUT, b"hello") + docker_piece(STDERR, b"oops\n") + docker_piece(1, b"")
    demux = AttachDemux()
    pieces = []
    for i in range(len(data)):
        pieces.extend(demux.feed(data[i : i + 1]))
    assert pieces == [(STDOUT, b"hello"), (STDERR, b"oops\n"), (STDOUT, b"")]


def test_demux_rejects_unknown_stream() -> None:
    with pytest.raises(AttachError):
        AttachDemux().feed(docker_piece(7, b"x"))


def test_demux_then_frames() -> None:
    frame = encode_frame({"id": 5, "ok": True, "result": {}})
    data = docker_piece(STDOUT, frame[:3]) + docker_piece(STDOUT, frame[3:])
    decoder = FrameDecoder()
    frames = [f for _, payload in AttachDemux().feed(data) for f in decoder.feed(payload)]
    assert frames == [{"id": 5, "ok": True, "result": {}}]


def test_the_stream_gives_stdout_only_and_logs_stderr(caplog: pytest.LogCaptureFixture) -> None:
    ours, engine = socket.socketpair()
    stream = AttachStream(ours, "sbx-1")
    reply = encode_frame({"id": 1, "ok": True, "result": {"pong": True}})
    engine.sendall(docker_piece(STDERR, b"starting\n") + docker_piece(STDOUT, reply))
    stream.settimeout(2)
    with caplog.at_level(logging.WARNING):
        got = stream.recv(1 << 16)
    assert got == reply
    assert "sandbox sbx-1 agent: starting" in caplog.text
    stream.sendall(b"to stdin")
    assert engine.recv(100) == b"to stdin"  # Docker does not frame stdin
    engine.close()
    assert stream.recv(100) == b""
    stream.close()


def test_stderr_alone_times_out() -> None:
    ours, engine = socket.socketpair()
    stream = AttachStream(ours, "sbx")
    engine.sendall(docker_piece(STDERR, b"noise\n"))
    stream.settimeout(0.2)
    with pytest.raises(TimeoutError):
        stream.recv(100)
    stream.close()
    engine.close()


def test_the_agent_client_reads_through_it() -> None:
    ours, engine = socket.socketpair()
    client = AgentClient(AttachStream(ours, "sbx"), "sbx")
    reply = encode_frame({"id": 1, "ok": True, "result": {"x": 1}})
    engine.sendall(docker_piece(STDOUT, reply[:5]) + docker_piece(STDOUT, reply[5:]))
    assert client.request("ping", timeout=2) == {"x": 1}
    assert FrameDecoder().feed(engine.recv(1 << 16)) == [{"id": 1, "op": "ping"}]
    client.close()
    engine.close()
