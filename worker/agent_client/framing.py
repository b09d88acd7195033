"""Framing of the agent channel: pure code, no I/O, so it is unit-tested alone.

The wire format is ``docs/agent-protocol.md``: a 4-byte big-endian length,
then that many bytes of UTF-8 JSON; or, with ``BINARY`` set in the length word
(the agent's ``pack`` and ``read_range`` replies), the JSON's own length, the
JSON reply, and raw bytes that the decoder puts in its ``result["data"]``.
``FrameDecoder`` cuts the agent's stdout bytes into frames, incrementally:
bytes arrive as the stream gives them, split anywhere. A runtime's own
wrapping of the stream (Docker's attach headers) is the runtime's business and
never reaches this module
(``worker.runtimes.docker_attach``). ``MAX_FRAME`` and ``compact_json`` are the
agent's own (``worker.agent.framing``): one definition of the bytes on the wire.
"""

from __future__ import annotations

import json
from typing import Any

from sandgrid.errors import ErrorCode, InvalidInput, NotFound, SandboxError, SandgridError
from worker.agent.framing import BINARY, MAX_FRAME, compact_json
from worker.agent.framing import LENGTH as _LENGTH

__all__ = [
    "FrameDecoder",
    "FrameError",
    "decode_binary",
    "decode_frame",
    "encode_frame",
    "error_from_reply",
]


class FrameError(ValueError):
    """The byte stream is not valid framing: the channel cannot be trusted any more."""


def encode_frame(obj: dict[str, Any]) -> bytes:
    """One frame: length prefix + compact UTF-8 JSON.

    Raises:
        InvalidInput: the encoded message is larger than ``MAX_FRAME``; nothing
            was sent, so the caller can report it as bad input.
    """
    body = compact_json(obj)
    if len(body) > MAX_FRAME:
        raise InvalidInput(
            f"request of {len(body)} bytes exceeds the frame cap of {MAX_FRAME}",
            code=ErrorCode.PAYLOAD_TOO_LARGE,
            operation=str(obj.get("op", "")),
            context={"size": len(body), "limit": MAX_FRAME},
        )
    return _LENGTH.pack(len(body)) + body


def decode_frame(body: bytes) -> dict[str, Any]:
    """Parse one frame body; anything but a JSON object is a framing error."""
    try:
        obj = json.loads(body)
    except ValueError as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"frame is a JSON {type(obj).__name__}, not an object")
    return obj


def decode_binary(body: bytes) -> dict[str, Any]:
    """Parse one binary frame's body: the JSON's length, a successful reply, the bytes.

    The bytes become the reply's ``result["data"]``; anything else (a short
    body, a length past its end, an error reply, a result that is no object or
    already has ``data``) is a framing error.
    """
    if len(body) < _LENGTH.size:
        raise FrameError(f"binary frame of {len(body)} bytes has no JSON length")
    (size,) = _LENGTH.unpack_from(body)
    end = _LENGTH.size + size
    if end > len(body):
        raise FrameError(f"binary frame's JSON of {size} bytes overruns the frame")
    obj = decode_frame(body[_LENGTH.size : end])
    result = obj.get("result")
    if obj.get("ok") is not True or not isinstance(result, dict) or "data" in result:
        raise FrameError("a binary frame must be a successful reply whose result has no data")
    result["data"] = body[end:]
    return obj


class FrameDecoder:
    """Cut a byte stream into frames, whatever sizes the bytes arrive in."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add bytes; return every frame they completed, in order."""
        self._buf += data
        frames: list[dict[str, Any]] = []
        while len(self._buf) >= _LENGTH.size:
            (word,) = _LENGTH.unpack_from(self._buf)
            size = word & ~BINARY
            if size > self._max:
                raise FrameError(f"frame of {size} bytes exceeds the cap of {self._max}")
            end = _LENGTH.size + size
            if len(self._buf) < end:
                break
            with memoryview(self._buf) as view:
                body = view[_LENGTH.size : end].tobytes()
            frames.append(decode_binary(body) if word & BINARY else decode_frame(body))
            del self._buf[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)


_INPUT_CODES = {
    ErrorCode.INVALID_INPUT,
    ErrorCode.PATH_OUTSIDE_WORKSPACE,
    ErrorCode.PAYLOAD_TOO_LARGE,
}


def error_from_reply(operation: str, error: dict[str, Any]) -> SandgridError:
    """The sandgrid error for an agent's ``{"code", "message", "context"}`` reply.

    Input errors (bad path, payload too large...) become ``InvalidInput`` with
    the agent's code; anything else is a ``SandboxError``.
    """
    message = str(error.get("message", "the agent refused the request"))
    context = dict(error.get("context") or {})
    try:
        code = ErrorCode(str(error.get("code", ErrorCode.SANDBOX_ERROR)))
    except ValueError:
        code = ErrorCode.SANDBOX_ERROR
    if code in _INPUT_CODES:
        return InvalidInput(message, code=code, operation=operation, context=context)
    if code == ErrorCode.NOT_FOUND:  # a background process the sandbox does not have
        return NotFound(message, code=code, operation=operation, context=context)
    return SandboxError(message, code=ErrorCode.SANDBOX_ERROR, operation=operation, context=context)
