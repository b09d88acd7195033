"""Frames on the exec channel: a 4-byte big-endian length, then that much compact UTF-8 JSON.

Both ends use this module: the agent reads requests on fd 0 and writes replies
on fd 1 with ``recv``/``send``; the worker (``worker.agent_client.framing``) frames its
requests with ``LENGTH`` and ``compact_json``, so the bytes on the wire are
produced by one function whichever end writes them.

A reply whose result is a ``Payload`` (``pack``, ``read_range``) is a binary
frame: ``BINARY`` set in its length word, then the JSON's own length, the JSON
reply, and the payload's bytes as they are. Bulk bytes then cross the channel
without base64 and JSON (~7 ms a MiB on each side, plus a third more bytes).
"""

from __future__ import annotations

import json
import os
import struct
import threading
from typing import NamedTuple

from .errors import AgentError, Json

__all__ = [
    "BINARY",
    "LENGTH",
    "MAX_FRAME",
    "Payload",
    "compact_json",
    "read_exact",
    "recv",
    "send",
    "write_all",
]

MAX_FRAME = 64 << 20
LENGTH = struct.Struct(">I")
BINARY = 1 << 31
"""The length word's top bit: the frame is binary (the JSON's length, the JSON, raw
bytes). ``MAX_FRAME`` is far below it, so no JSON frame's length has it."""
_OUT_LOCK = threading.Lock()


class Payload(NamedTuple):
    """An op's result whose bytes travel raw: ``fields`` is the ``result`` object of
    the reply, and the worker finds ``data`` in it as ``result["data"]``."""

    fields: Json
    data: bytes


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (``os.write`` may write fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def compact_json(obj: Json) -> bytes:
    """Compact UTF-8 JSON, non-ASCII text unescaped.

    ``ensure_ascii=False`` is 4x slower on long strings (0.13 s against 0.03 s
    for the base64 of 8 MiB), though its output is the same when nothing needs
    a ``\\u`` escape; so the ASCII form is tried first and kept unless it has one.
    """
    fast = json.dumps(obj, separators=(",", ":"))
    if "\\u" not in fast:
        return fast.encode()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def send(obj: Json) -> None:
    """Write one reply or event frame on fd 1; an oversized reply becomes an error.

    A reply whose ``result`` is a ``Payload`` goes as a binary frame: its JSON
    head in one write, then the payload's bytes, never copied into the frame."""
    result = obj.get("result")
    if isinstance(result, Payload):
        json_part = compact_json({**obj, "result": result.fields})
        head, data = LENGTH.pack(len(json_part)) + json_part, result.data
        flag = BINARY
    else:
        head, data, flag = compact_json(obj), b"", 0
    size = len(head) + len(data)
    if size > MAX_FRAME:
        err = AgentError("payload_too_large", f"reply of {size} bytes exceeds the frame cap")
        head = json.dumps({"id": obj.get("id"), "ok": False, "error": err.body()}).encode()
        data, flag, size = b"", 0, len(head)
    with _OUT_LOCK:
        write_all(1, LENGTH.pack(size | flag) + head)
        if data:
            write_all(1, data)


def read_exact(fd: int, n: int) -> bytes | None:
    """``n`` bytes from ``fd``, ``None`` at EOF."""
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv() -> Json | None:
    """The next request, ``None`` at EOF; an oversized frame is read and refused."""
    head = read_exact(0, LENGTH.size)
    if head is None:
        return None
    (word,) = LENGTH.unpack(head)
    size = word & ~BINARY
    if size > MAX_FRAME or word & BINARY:  # requests are JSON only
        while size:
            size -= len(read_exact(0, min(size, 1 << 20)) or b"x" * size)
        return {"op": "_bad" if word & BINARY else "_too_large"}
    body = read_exact(0, size)
    if body is None:
        return None
    obj = json.loads(body)
    if not isinstance(obj, dict):
        return {"op": "_bad"}
    return obj
