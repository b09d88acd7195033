"""The terminal's limits and its WebSocket messages, for the API and the SDK alike.

``WS /v1/sessions/{id}/pty`` carries JSON text frames. The client sends::

    {"type": "stdin", "data": "ls\\r"}
    {"type": "resize", "rows": 40, "cols": 120}

and the server sends::

    {"type": "stdout", "data": "..."}          terminal output (UTF-8 text)
    {"type": "exit", "code": 0, "reason": "exited"}   the last frame

``reason`` is ``exited`` (the shell ended; ``code`` is its status), ``closed``
(the client hung up), ``idle`` or ``max_time`` (a limit ended it), or
``error`` (with ``message``). Pure code: one parser, so the API refuses a bad
frame with the same ``InvalidInput`` (naming the field and the rule) that the
SDK raises before it sends one.

A frame the protocol does not expect ends the terminal: the server sends an
``error`` frame naming the field and the rule, then closes with
``CLOSE_UNSUPPORTED_FRAME`` (1003: a binary frame) or ``CLOSE_BAD_MESSAGE``
(4422: not a JSON object, an unknown ``type``, a field breaking its rule). A
refused open closes with 4000 + the HTTP status of its error (4401, 4404, 4409,
4429...).

The token never travels in the URL (URLs are logged): the SDK sends the
``Authorization`` header; a browser, which cannot, offers the subprotocols
``bearer_subprotocol(token)`` and ``SUBPROTOCOL`` and the server answers
``SUBPROTOCOL``, never the token.
"""

from __future__ import annotations

import json
from typing import Any

from sandgrid.errors import InvalidInput

__all__ = [
    "BEARER_PREFIX",
    "CLOSE_BAD_MESSAGE",
    "CLOSE_UNSUPPORTED_FRAME",
    "PTY_DEFAULT_COLS",
    "PTY_DEFAULT_IDLE_S",
    "PTY_DEFAULT_MAX_S",
    "PTY_DEFAULT_ROWS",
    "PTY_MAX_DIM",
    "PTY_MAX_IDLE_S",
    "PTY_MAX_INPUT",
    "PTY_MAX_S",
    "SUBPROTOCOL",
    "bearer_subprotocol",
    "exit_message",
    "parse_client_message",
    "resize_message",
    "stdin_message",
    "stdout_message",
]

PTY_DEFAULT_ROWS = 24
PTY_DEFAULT_COLS = 80
PTY_MAX_DIM = 1000
PTY_DEFAULT_IDLE_S = 600.0
"""A terminal with no input and no output for this long is closed."""
PTY_MAX_IDLE_S = 3600.0
PTY_DEFAULT_MAX_S = 3600.0
"""A terminal is closed this long after it opened, whatever it does."""
PTY_MAX_S = 3600.0
"""Under the broker's visibility timeout (``SANDGRID_VISIBILITY_TIMEOUT_S``, 3900 s),
so a terminal turn is never handed out twice."""
PTY_MAX_INPUT = 64 << 10
"""Characters of one ``stdin`` message (a paste is sent in pieces)."""
CLOSE_UNSUPPORTED_FRAME = 1003
"""Close code of a binary frame (RFC 6455 "unsupported data"): the protocol is JSON text."""
CLOSE_BAD_MESSAGE = 4422
"""Close code of a text frame that is not a valid message (its ``error`` frame names why)."""
SUBPROTOCOL = "sandgrid.v1"
"""The WebSocket subprotocol the server answers."""
BEARER_PREFIX = "sandgrid.bearer."
"""A subprotocol ``sandgrid.bearer.<token>`` carries the token (browsers)."""


def bearer_subprotocol(token: str) -> str:
    """The subprotocol that carries ``token`` (offer it with ``SUBPROTOCOL``)."""
    return BEARER_PREFIX + token


def _refuse(field: str, rule: str) -> InvalidInput:
    return InvalidInput(
        f"terminal message: {field} {rule}",
        operation="pty",
        context={"field": field, "rule": rule},
    )


def parse_client_message(raw: str | bytes) -> dict[str, Any]:
    """A client frame, checked: ``stdin`` with ``data``, or ``resize`` with ``rows``, ``cols``.

    Raises:
        InvalidInput: not a JSON object, unknown ``type``, or a field breaking its rule.
    """
    try:
        msg = json.loads(raw)
    except ValueError:
        raise _refuse("frame", "must be a JSON object") from None
    if not isinstance(msg, dict):
        raise _refuse("frame", "must be a JSON object")
    kind = msg.get("type")
    if kind == "stdin":
        data = msg.get("data")
        if not isinstance(data, str):
            raise _refuse("data", "must be a string")
        if len(data) > PTY_MAX_INPUT:
            raise _refuse("data", f"must be at most {PTY_MAX_INPUT} characters")
        return {"type": "stdin", "data": data}
    if kind == "resize":
        for key in ("rows", "cols"):
            value = msg.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise _refuse(key, "must be an integer")
            if not 1 <= value <= PTY_MAX_DIM:
                raise _refuse(key, f"must be 1..{PTY_MAX_DIM}")
        return {"type": "resize", "rows": msg["rows"], "cols": msg["cols"]}
    raise _refuse("type", "must be 'stdin' or 'resize'")


def stdin_message(data: str) -> str:
    """The frame that types ``data`` (checked)."""
    return json.dumps(parse_client_message(json.dumps({"type": "stdin", "data": data})))


def resize_message(rows: int, cols: int) -> str:
    """The frame that resizes the terminal (checked)."""
    msg = {"type": "resize", "rows": rows, "cols": cols}
    return json.dumps(parse_client_message(json.dumps(msg)))


def stdout_message(data: str) -> str:
    """A frame of output."""
    return json.dumps({"type": "stdout", "data": data})


def exit_message(code: int | None, reason: str, message: str = "") -> str:
    """The last frame."""
    body: dict[str, Any] = {"type": "exit", "code": code, "reason": reason}
    if message:
        body["message"] = message
    return json.dumps(body)
