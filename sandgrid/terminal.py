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
"""

from __future__ import annotations

import json
from typing import Any

from sandgrid.errors import InvalidInput

__all__ = [
    "PTY_DEFAULT_COLS",
    "PTY_DEFAULT_IDLE_S",
    "PTY_DEFAULT_MAX_S",
    "PTY_DEFAULT_ROWS",
    "PTY_MAX_DIM",
    "PTY_MAX_IDLE_S",
    "PTY_MAX_INPUT",
    "PTY_MAX_S",
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
