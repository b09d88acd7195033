"""A client that hangs up mid-body is no error of the grid's: no traceback, no 500."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from starlette.requests import ClientDisconnect

from scheduler.api.errors import install_error_handlers


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/upload")
    async def upload(request: Request) -> None:
        raise ClientDisconnect()

    return app


def test_a_client_gone_mid_body_is_logged_as_information_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO), TestClient(_app()) as http:
        answer = http.post("/v1/upload", content=b"x")
    assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_input"
    lines = [r for r in caplog.records if r.name == "sandgrid.api"]
    assert [r.levelno for r in lines] == [logging.INFO]
    assert "client closed the connection during POST /v1/upload" in lines[0].getMessage()
    assert all(r.exc_info is None for r in caplog.records)
