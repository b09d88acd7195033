"""Framing of the agent channel: pure code, no sandbox."""

from __future__ import annotations

import json
import struct

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, SandboxError
from worker.agent.framing import MAX_FRAME, compact_json
from worker.agent_client.framing import (
    FrameDecoder,
    FrameError,
    decode_frame,
    encode_frame,
    error_from_reply,
)


def test_encode_is_length_prefixed_json() -> None:
    frame = encode_frame({"id": 1, "op": "ping", "text": "é"})
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4
    assert json.loads(frame[4:]) == {"id": 1, "op": "ping", "text": "é"}


@pytest.mark.parametrize(
    "text",
    ["plain", "é ü", "emoji 😀", "line\nbreak\ttab", "\x01\x1f\x7f", "back\\slash \\u0041",
     'quote "', "\u2028 \u2029", "A" * 100_000],
)  # fmt: skip
def test_compact_json_is_the_utf8_form_whatever_it_tries_first(text: str) -> None:
    """The ASCII form is tried first for speed; the bytes are those of
    ``ensure_ascii=False`` in every case, non-ASCII text unescaped."""
    obj = {"k": text, "nested": [{"é": text}], "n": 1}
    want = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    assert compact_json(obj) == want


def test_encode_refuses_oversized() -> None:
    with pytest.raises(InvalidInput) as err:
        encode_frame({"op": "write", "data_b64": "x" * (MAX_FRAME + 1)})
    assert err.value.code == ErrorCode.PAYLOAD_TOO_LARGE and err.value.operation == "write"


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_decoder_handles_any_split(step: int) -> None:
    messages = [{"id": i, "x": "y" * i} for i in range(20)]
    stream = b"".join(encode_frame(m) for m in messages)
    decoder = FrameDecoder()
    out = []
    for i in range(0, len(stream), step):
        out.extend(decoder.feed(stream[i : i + step]))
    assert out == messages and decoder.pending == 0


def test_decoder_rejects_garbage() -> None:
    with pytest.raises(FrameError):
        FrameDecoder(max_frame=10).feed(struct.pack(">I", 11))
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">I", 3) + b"[1]")
    with pytest.raises(FrameError):
        decode_frame(b"not json")


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("invalid_input", InvalidInput),
        ("path_outside_workspace", InvalidInput),
        ("payload_too_large", InvalidInput),
        ("sandbox_error", SandboxError),
        ("something_new", SandboxError),
    ],
)
def test_error_from_reply(code: str, cls: type) -> None:
    err = error_from_reply("files.read", {"code": code, "message": "m", "context": {"path": "p"}})
    assert type(err) is cls and err.operation == "files.read" and err.context == {"path": "p"}
    if cls is InvalidInput:
        assert err.code == code
