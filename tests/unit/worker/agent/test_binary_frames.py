"""Binary frames: ``pack`` and ``read_range`` replies carry their bytes raw, not base64."""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import threading

import pytest

from sandgrid.errors import SandboxError
from worker.agent import framing, processes
from worker.agent.framing import BINARY, LENGTH, Payload
from worker.agent_client.client import AgentClient
from worker.agent_client.framing import FrameDecoder, FrameError, decode_binary
from worker.sandboxes.files import AgentFiles, file_range

_DATA = os.urandom(300_000) + b"\0\n{}\\u0041"


def _sent(monkeypatch: pytest.MonkeyPatch, obj: dict[str, object]) -> bytes:
    """What ``framing.send`` writes on fd 1 for ``obj``."""
    out: list[bytes] = []
    monkeypatch.setattr(framing, "write_all", lambda fd, data: out.append(bytes(data)))
    framing.send(obj)
    return b"".join(out)


def _binary(fields: dict[str, object], data: bytes, rid: int = 7) -> bytes:
    head = json.dumps({"id": rid, "ok": True, "result": fields}).encode()
    body = LENGTH.pack(len(head)) + head + data
    return LENGTH.pack(len(body) | BINARY) + body


@pytest.mark.parametrize("step", [1, 4, 1000, 1 << 20])
def test_a_payload_reply_reaches_the_worker_raw_whatever_the_split(
    monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    wire = _sent(monkeypatch, {"id": 7, "ok": True, "result": Payload({"size": 3}, _DATA)})
    (word,) = LENGTH.unpack_from(wire)
    assert word & BINARY and (word & ~BINARY) == len(wire) - LENGTH.size
    assert len(wire) < len(_DATA) + 100  # no base64: a third more bytes
    stream = wire + _sent(monkeypatch, {"id": 8, "ok": True, "result": {"n": 1}})
    decoder = FrameDecoder()
    frames = [f for i in range(0, len(stream), step) for f in decoder.feed(stream[i : i + step])]
    assert frames == [
        {"id": 7, "ok": True, "result": {"size": 3, "data": _DATA}},
        {"id": 8, "ok": True, "result": {"n": 1}},
    ]
    assert decoder.pending == 0


def test_an_oversized_payload_becomes_a_json_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "MAX_FRAME", 1000)
    wire = _sent(monkeypatch, {"id": 3, "ok": True, "result": Payload({}, bytes(2000))})
    (word,) = LENGTH.unpack_from(wire)
    assert not word & BINARY
    reply = json.loads(wire[LENGTH.size :])
    assert reply["id"] == 3 and reply["error"]["code"] == "payload_too_large"


def test_the_frame_cap_counts_a_binary_frame_whole() -> None:
    frame = _binary({}, bytes(100))
    with pytest.raises(FrameError, match="exceeds the cap"):
        FrameDecoder(max_frame=100).feed(frame)
    assert FrameDecoder(max_frame=len(frame) - LENGTH.size).feed(frame)[0]["result"]["data"]


def _with_head(head: bytes) -> bytes:
    return LENGTH.pack(len(head)) + head + b"raw"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\0\0", "no JSON length"),
        (LENGTH.pack(50) + b"{}", "overruns"),
        (_with_head(b"[]"), "not an object"),
        (_with_head(b"nope"), "not JSON"),
        (_with_head(b'{"ok":true}'), "successful reply"),
        (_with_head(b'{"id":1,"ok":false,"error":{"code":"x"}}'), "successful reply"),
        (_with_head(b'{"ok":true,"result":[1,2]}'), "successful reply"),
        (_with_head(b'{"ok":true,"result":{"data":1}}'), "successful reply"),
    ],
)
def test_a_bad_binary_frame_is_a_framing_error(body: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        decode_binary(body)
    with pytest.raises(FrameError):
        FrameDecoder().feed(LENGTH.pack(len(body) | BINARY) + body)


def test_the_agent_refuses_a_binary_request_and_reads_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests are JSON only: a binary one is read to its end and refused, and the
    next frame is read where it starts."""
    nxt = json.dumps({"id": 2, "op": "ping"}).encode()
    stdin = io.BytesIO(_binary({}, b"xyz") + LENGTH.pack(len(nxt)) + nxt)
    monkeypatch.setattr(framing, "read_exact", lambda _fd, n: stdin.read(n) or None)
    assert framing.recv() == {"op": "_bad"}
    assert framing.recv() == {"id": 2, "op": "ping"}


@pytest.mark.parametrize("result", [Payload({"size": 5}, _DATA), Payload({}, b""), {"files": 2}])
def test_a_user_child_hands_its_payload_back_raw(result: object) -> None:
    """The forked user child (no per-thread credentials) writes a payload as it is."""
    raw = processes._child_bytes({"ok": True, "result": result})
    back = processes._child_reply(raw)
    assert back == {"ok": True, "result": result}
    assert type(back["result"]) is type(result)


@pytest.mark.parametrize("raw", [b"B\0\0", b"B" + LENGTH.pack(10) + b"{}", b"", b"nonsense"])
def test_a_truncated_child_reply_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        processes._child_reply(raw)


class _Caller:
    def __init__(self, reply: dict[str, object]) -> None:
        self.reply = reply

    def call(self, sbx: object, op: str, fields: dict[str, object]) -> dict[str, object]:
        return self.reply


def test_the_worker_takes_the_raw_bytes_of_pack_and_read_range() -> None:
    files = AgentFiles(_Caller({"data": _DATA}))
    assert files.pack(None, ["/workspace/a"]) == _DATA  # type: ignore[arg-type]
    got = file_range({"data": _DATA, "size": len(_DATA), "mtime_ns": 5})
    assert got == (_DATA, len(_DATA), 5)


@pytest.mark.parametrize("reply", [{}, {"data_b64": "eHl6"}, {"data": "xyz"}])
def test_a_reply_without_raw_bytes_is_a_sandbox_error(reply: dict[str, object]) -> None:
    with pytest.raises(SandboxError, match="no bytes"):
        AgentFiles(_Caller(reply)).pack(None, ["/workspace/a"])  # type: ignore[arg-type]
    with pytest.raises(SandboxError):
        file_range({**reply, "size": 3, "mtime_ns": 1})


def test_a_binary_reply_through_the_client_beside_json_ones() -> None:
    ours, theirs = socket.socketpair()
    client = AgentClient(ours, "sbx-test")

    def agent() -> None:
        frames = FrameDecoder()
        got: list[dict[str, object]] = []
        while len(got) < 1:
            got += frames.feed(theirs.recv(65536))
        rid = int(str(got[0]["id"]))
        theirs.sendall(_binary({"size": len(_DATA)}, _DATA, rid))

    t = threading.Thread(target=agent, daemon=True)
    t.start()
    try:
        assert client.request("pack", {"files": []}, timeout=5) == {
            "size": len(_DATA),
            "data": _DATA,
        }
    finally:
        t.join(5)
        client.close()
        theirs.close()


def test_the_flag_is_above_any_frame_length() -> None:
    assert framing.MAX_FRAME < BINARY < 1 << 32 and struct.calcsize(">I") == LENGTH.size
