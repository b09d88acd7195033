"""The terminal route's refusals, on the in-process API (no worker is reached)."""

from __future__ import annotations

import json
import time

import pytest
import redis
from starlette.websockets import WebSocketDisconnect

from sandgrid.errors import InvalidInput
from sandgrid.terminal import (
    CLOSE_BAD_MESSAGE,
    CLOSE_UNSUPPORTED_FRAME,
    SUBPROTOCOL,
    bearer_subprotocol,
)
from sandgrid.wire import names
from scheduler.api.pty import _frame_refusal
from scheduler.turns.terminal import pty_op
from tests.support.fakes import Grid


def _refusal(
    grid: Grid, url: str, headers: dict[str, str] | None = None
) -> tuple[dict[str, object], int]:
    with grid.http.websocket_connect(url, headers=headers or {}) as ws:
        msg = json.loads(ws.receive_text())
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    return msg, closed.value.code


def test_no_token(grid: Grid) -> None:
    msg, code = _refusal(grid, "/v1/sessions/s-x/pty")
    assert msg["type"] == "error" and code == 4401


def test_token_in_the_url_is_refused_naming_the_rule(grid: Grid) -> None:
    msg, code = _refusal(grid, f"/v1/sessions/s-nope/pty?token={grid.token_a}")
    assert msg["type"] == "error" and code == 4401
    assert msg["error"]["context"]["rule"] == "never in the URL"  # type: ignore[index]
    assert grid.token_a not in json.dumps(msg)


def test_token_in_the_subprotocol_answered_without_it(grid: Grid) -> None:
    protocols = [bearer_subprotocol(grid.token_a), SUBPROTOCOL]
    with grid.http.websocket_connect("/v1/sessions/s-nope/pty", subprotocols=protocols) as ws:
        assert ws.accepted_subprotocol == SUBPROTOCOL
        msg = json.loads(ws.receive_text())
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert msg["type"] == "error" and closed.value.code == 4404  # authenticated: unknown session


def test_malformed_authorization_header(grid: Grid) -> None:
    msg, code = _refusal(grid, "/v1/sessions/s-x/pty", {"Authorization": "Basic abc"})
    assert code == 4401 and "Bearer" in msg["error"]["message"]  # type: ignore[index]


def test_terminals_per_tenant_capped(grid: Grid, redis_client: redis.Redis[str]) -> None:
    cap = grid.services.settings.streams.terminals_per_tenant
    key = names.stream_slots_key("terminal", "tenant", "acme")
    redis_client.zadd(key, {f"held-{i}": time.time() + 60 for i in range(cap)})
    msg, code = _refusal(grid, "/v1/sessions/s-x/pty", grid.headers())
    assert code == 4429
    assert msg["error"]["context"]["limit"] == "terminals_per_tenant"  # type: ignore[index]
    assert msg["error"]["context"]["retry_after"] > 0  # type: ignore[index]


def test_bad_parameter_names_the_field(grid: Grid) -> None:
    sid = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
    msg, code = _refusal(grid, f"/v1/sessions/{sid}/pty?cols=5000", grid.headers())
    assert code == 4422
    assert msg["error"]["context"]["field"] == "cols"  # type: ignore[index]


def test_pty_op_refusal() -> None:
    with pytest.raises(InvalidInput) as err:
        pty_op("t-12345678", {"max_s": "99999"})
    assert err.value.context["field"] == "max_s"


@pytest.mark.parametrize(
    ("message", "code", "field"),
    [
        ({"type": "websocket.receive", "bytes": b"\x00"}, CLOSE_UNSUPPORTED_FRAME, "frame"),
        ({"type": "websocket.receive", "text": "not json"}, CLOSE_BAD_MESSAGE, "frame"),
        ({"type": "websocket.receive", "text": '{"type": "paste"}'}, CLOSE_BAD_MESSAGE, "type"),
        ({"type": "websocket.receive", "text": '{"type": "stdin"}'}, CLOSE_BAD_MESSAGE, "data"),
    ],
)
def test_unexpected_frames_are_refused_with_their_close_code(
    message: dict[str, object], code: int, field: str
) -> None:
    msg, refusal = _frame_refusal(message)
    assert msg is None and refusal is not None
    err, close = refusal
    assert close == code and err.context["field"] == field


def test_a_good_frame_passes() -> None:
    msg, refusal = _frame_refusal(
        {"type": "websocket.receive", "text": '{"type": "stdin", "data": "x"}'}
    )
    assert refusal is None and msg == {"type": "stdin", "data": "x"}
