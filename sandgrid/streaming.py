"""Streamed turns on the wire: events, the cancel answer, and the SSE parser.

An exec asked with ``Accept: text/event-stream`` answers Server-Sent Events,
one per turn event (``sandgrid.wire.turnstream`` lists them): ``turn`` first,
then ``stdout``/``stderr`` chunks in the order they were written, flags
(``dropped``: output the worker could not buffer; ``gap``: events trimmed
before this reader saw them), and last ``result`` or ``error``. Each event's
``id:`` is its offset: ``GET /v1/sessions/{id}/turns/{turn_id}/events`` with
``Last-Event-ID`` (or ``?after=``) resumes after it, nothing lost or repeated.

``SSEParser`` is pure (lines in, events out), so the sync and async clients
share it and it is tested without a server.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from sandgrid.models import ExecResult, WireModel

__all__ = [
    "EVENT_STREAM",
    "LAST_EVENT_ID_HEADER",
    "TURN_ID_HEADER",
    "SSEParser",
    "TurnCancel",
    "TurnEvent",
]

#: The media type of a streamed exec (``Accept``) and its answer.
EVENT_STREAM = "text/event-stream"
#: The response header naming a streamed exec's turn (for cancel and re-attach).
TURN_ID_HEADER = "Sandgrid-Turn-Id"
#: The SSE header a re-attaching client sends: the last event id it has.
LAST_EVENT_ID_HEADER = "Last-Event-ID"


class TurnEvent(WireModel):
    """One event of a streamed turn."""

    type: Literal["turn", "stdout", "stderr", "dropped", "gap", "result", "error"]
    id: str = Field("", description="the event's offset: resume after it (Last-Event-ID)")
    data: str = Field("", description="the output text of a stdout or stderr chunk")
    bytes: int = Field(0, description="output bytes dropped (a dropped event)")
    turn_id: str = ""
    session: str = ""
    result: ExecResult | None = None
    error: dict[str, Any] | None = None
    template: dict[str, Any] | None = Field(
        None, description="a template build's final event: its record, log left out (25.2)"
    )

    @property
    def final(self) -> bool:
        """Whether this event ends the turn's stream."""
        return self.type in ("result", "error")


class TurnCancel(WireModel):
    """The answer of ``POST /v1/sessions/{id}/turns/{turn_id}/cancel``.

    ``cancelling``: the turn's processes are being killed (or it will not
    start); its result says ``cancelled: true``. ``finished``: it had already
    ended; nothing was done (a no-op, not an error).
    """

    turn_id: str
    state: Literal["cancelling", "finished"]


class SSEParser:
    """Server-Sent Events from text lines: feed lines, get ``TurnEvent`` objects."""

    def __init__(self) -> None:
        self._id = ""
        self._type = ""
        self._data: list[str] = []

    def feed(self, line: str) -> TurnEvent | None:
        """One line (without its newline); the event it completes, if any."""
        line = line.rstrip("\r")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: keep-alive
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            self._id = value
        elif name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> TurnEvent | None:
        if not self._data:
            self._type = ""
            return None
        body = json.loads("\n".join(self._data))
        event = TurnEvent.model_validate(
            {**body, "type": self._type or body.get("type"), "id": self._id}
        )
        self._type, self._data = "", []
        return event
