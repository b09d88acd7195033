"""The terminal route's refusals, on the in-process API (no worker is reached)."""

from __future__ import annotations

import json

import pytest
from starlette.websockets import WebSocketDisconnect

from sandgrid.errors import InvalidInput
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


def test_unknown_session_with_query_token(grid: Grid) -> None:
    msg, code = _refusal(grid, f"/v1/sessions/s-nope/pty?token={grid.token_a}")
    assert msg["type"] == "error" and code == 4404


def test_bad_parameter_names_the_field(grid: Grid) -> None:
    sid = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
    msg, code = _refusal(grid, f"/v1/sessions/{sid}/pty?cols=5000", grid.headers())
    assert code == 4422
    assert msg["error"]["context"]["field"] == "cols"  # type: ignore[index]


def test_pty_op_refusal() -> None:
    with pytest.raises(InvalidInput) as err:
        pty_op("t-12345678", {"max_s": "99999"})
    assert err.value.context["field"] == "max_s"
