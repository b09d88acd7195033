"""The terminal's WebSocket messages, limits and the SDK's reading of them (pure)."""

from __future__ import annotations

import json

import pytest

from sandgrid.client._pty import TerminalState, pty_url
from sandgrid.errors import AuthError, InvalidInput
from sandgrid.ops.terminal import PtyOp
from sandgrid.terminal import (
    PTY_MAX_INPUT,
    exit_message,
    parse_client_message,
    resize_message,
    stdin_message,
)


def test_client_messages() -> None:
    assert json.loads(stdin_message("ls\r")) == {"type": "stdin", "data": "ls\r"}
    assert json.loads(resize_message(40, 120)) == {"type": "resize", "rows": 40, "cols": 120}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("not json", "frame"),
        ("[1]", "frame"),
        ('{"type": "paste"}', "type"),
        ('{"type": "stdin", "data": 5}', "data"),
        (json.dumps({"type": "stdin", "data": "x" * (PTY_MAX_INPUT + 1)}), "data"),
        ('{"type": "resize", "rows": 0, "cols": 80}', "rows"),
        ('{"type": "resize", "rows": 24, "cols": true}', "cols"),
        ('{"type": "resize", "rows": 24, "cols": 1001}', "cols"),
    ],
)
def test_bad_client_messages_name_the_field(raw: str, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_client_message(raw)
    assert err.value.context["field"] == field and err.value.context["rule"]


def test_sdk_reads_server_messages() -> None:
    state = TerminalState()
    assert state.feed(json.dumps({"type": "stdout", "data": "hi"})) == "hi"
    assert not state.ended
    assert state.feed(exit_message(3, "exited")) is None
    assert (state.exit_code, state.reason, state.ended) == (3, "exited", True)
    body = AuthError("unknown token").to_body()
    with pytest.raises(AuthError):
        TerminalState().feed(json.dumps({"type": "error", **body}))


def test_pty_url() -> None:
    url = pty_url("https://grid.example", "s-1", {"rows": 5, "idle_s": None})
    assert url == "wss://grid.example/v1/sessions/s-1/pty?rows=5"
    assert pty_url("http://h:1", "s", {}) == "ws://h:1/v1/sessions/s/pty"


@pytest.mark.parametrize(
    "fields",
    [{"rows": 0}, {"cols": 1001}, {"idle_s": 0}, {"max_s": 3601}, {"term": "a b"}, {"pty_id": "x"}],
)
def test_pty_op_limits(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PtyOp.model_validate({"pty_id": "t-12345678", **fields})
