"""``AgentClient.quiet``: the pool's proof, without a round trip, that an idle agent is there."""

from __future__ import annotations

import socket

from worker.agent_client.client import AgentClient
from worker.agent_client.framing import encode_frame


def test_an_idle_open_channel_is_quiet() -> None:
    ours, theirs = socket.socketpair()
    client = AgentClient(ours, "sbx-test")
    assert client.quiet()
    client.close()
    theirs.close()


def test_a_stream_that_ended_is_not_quiet() -> None:
    ours, theirs = socket.socketpair()
    client = AgentClient(ours, "sbx-test")
    theirs.close()  # the container exited: its attach stream ends
    assert not client.quiet()
    client.close()


def test_a_frame_nobody_asked_for_is_not_quiet_nor_a_closed_channel() -> None:
    ours, theirs = socket.socketpair()
    client = AgentClient(ours, "sbx-test")
    theirs.sendall(encode_frame({"id": 99, "ok": True, "result": {}}))
    assert not client.quiet()
    client.close()
    assert not client.quiet()
    theirs.close()
