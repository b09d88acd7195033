"""The API's connection to a worker's port listener: one signed line each way, then bytes.

The API opens a TCP connection to the owning worker's listener (the address
its heartbeat names) and writes one line, the JSON ``Hello``: the session, the
port, the time and a nonce, signed with the ``link`` key (``portkeys``). The
worker checks the signature and the time (``MAX_SKEW_S``), finds the session's
sandbox, has its agent connect to the port on the sandbox's loopback, and
answers one JSON line: ``{"ok": true}``, or ``{"ok": false, "status": <HTTP
status>, "error": <the error body>}``. After ``ok`` the connection is the
sandbox port's own byte stream, both ways, until either side closes it.

The API may send the start of that stream right behind the hello, before the
answer (an HTTP request's head: ``forward``): the worker forwards those early
bytes once the port is connected, counted against the caps as any, and drops
them with a refusal, whose answer the API still reads. This saves the round
trip through worker and agent a request would otherwise wait for.

No tenant token crosses this link: the API has checked the tenant (or the
preview URL) before it connects.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sandgrid.errors import SandgridError, error_from_body

__all__ = ["MAX_LINE", "MAX_SKEW_S", "Hello", "answer_line", "parse_answer", "read_hello"]

#: The longest line either side sends (a hello is ~200 bytes).
MAX_LINE = 4096
#: A hello older (or newer) than this is refused: a captured one soon stops working.
MAX_SKEW_S = 30.0


@dataclass(frozen=True)
class Hello:
    """Which session's port the API wants, and when it asked."""

    session: str
    port: int
    ts: float
    nonce: str

    def _signed(self) -> bytes:
        return f"{self.session}|{self.port}|{self.ts!r}|{self.nonce}".encode()

    @classmethod
    def make(cls, session: str, port: int) -> Hello:
        return cls(session, port, time.time(), secrets.token_hex(8))

    def line(self, key: bytes) -> bytes:
        """The signed line the API sends."""
        mac = hmac.new(key, self._signed(), hashlib.sha256).hexdigest()
        body = {"v": 1, "s": self.session, "p": self.port, "ts": self.ts, "n": self.nonce}
        return json.dumps({**body, "mac": mac}, separators=(",", ":")).encode() + b"\n"


def read_hello(key: bytes, line: bytes, *, now: float | None = None) -> Hello:
    """The hello of ``line``, checked.

    Raises:
        ValueError: malformed, badly signed, or outside ``MAX_SKEW_S`` (the
            worker closes the connection without an answer that could teach).
    """
    if len(line) > MAX_LINE:
        raise ValueError("hello too long")
    body = json.loads(line)
    if not isinstance(body, dict) or body.get("v") != 1:
        raise ValueError("not a version 1 hello")
    hello = Hello(str(body["s"]), int(body["p"]), float(body["ts"]), str(body["n"]))
    mac = hmac.new(key, hello._signed(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, str(body.get("mac", ""))):
        raise ValueError("bad signature")
    if abs((time.time() if now is None else now) - hello.ts) > MAX_SKEW_S:
        raise ValueError("stale hello")
    return hello


def answer_line(error: SandgridError | None = None) -> bytes:
    """The worker's answer: ok, or the error the API answers the request with."""
    body: dict[str, Any] = {"ok": True}
    if error is not None:
        body = {"ok": False, "status": error.http_status, **error.to_body()}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def parse_answer(line: bytes) -> SandgridError | None:
    """None for ok, else the worker's error (a malformed answer is an error too)."""
    try:
        body = json.loads(line)
        if body.get("ok") is True:
            return None
        return error_from_body(body, int(body.get("status", 502)))
    except (ValueError, AttributeError, TypeError):
        return SandgridError("the worker's port listener answered garbage", operation="ports")
