"""Refusals: the error a request gets, and the checks of its fields."""

from __future__ import annotations

import base64
import os
from typing import Any

__all__ = ["AgentError", "Json", "b64_field", "log", "need"]

Json = dict[str, Any]


class AgentError(Exception):
    """An error reply: ``code`` is one of ``sandgrid.errors.ErrorCode``."""

    def __init__(self, code: str, message: str, **context: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.context = code, message, context

    def body(self) -> Json:
        """The ``error`` object of a reply."""
        return {"code": self.code, "message": self.message, "context": self.context}


def log(msg: str) -> None:
    """One diagnostic line on fd 2 (the worker logs the agent's stderr)."""
    os.write(2, f"sandgrid-agent: {msg}\n".encode(errors="replace"))


def need(req: Json, key: str, kind: type | tuple[type, ...]) -> Any:
    """``req[key]`` when it is of ``kind`` (a bool is no int), else a refusal naming it."""
    value = req.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise AgentError("invalid_input", f"field {key!r} must be {kind}", field=key)
    return value


def b64_field(req: Json, key: str = "data_b64") -> bytes:
    """The bytes of a base64 field, refused unless it is strict base64."""
    try:
        return base64.b64decode(need(req, key, str), validate=True)
    except ValueError:
        raise AgentError("invalid_input", f"field {key!r} is not valid base64", field=key) from None
