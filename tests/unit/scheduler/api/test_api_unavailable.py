"""Redis down is a clear 503 ``registry_unavailable`` with Retry-After, never a 500.

The real API, built on a Redis URL nobody listens on (the broker and the result
backend too): every route that needs the registry answers 503 with the code and
a ``Retry-After`` header; ``GET /v1/health`` keeps its own 503 body.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sandgrid.errors import ErrorCode, SandgridError
from sandgrid.models import ExecRequest, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.jobs import TurnJob
from sandgrid.wire.settings import Settings
from scheduler.api import create_app
from scheduler.api.deps import current_tenant
from scheduler.tenants import Tenant
from scheduler.turns.dispatch import CeleryDispatcher


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def down_settings() -> Settings:
    return Settings(redis_url=f"redis://127.0.0.1:{_closed_port()}/0", auth_cache_s=0.0)


@pytest.fixture
def http(down_settings: Settings) -> Iterator[TestClient]:
    app = create_app(down_settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _unavailable(r: Any) -> None:
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "registry_unavailable" and err["type"] == "InfrastructureError"
    assert "Redis" in err["message"] and err["retryable"] is True
    assert int(r.headers["Retry-After"]) >= 1


def test_authentication_without_redis_is_503(http: TestClient) -> None:
    _unavailable(http.get("/v1/sessions", headers={"Authorization": "Bearer sg_x"}))


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/sessions", {}),
        ("GET", "/v1/sessions", None),
        ("GET", "/v1/sessions/s-abc", None),
        ("DELETE", "/v1/sessions/s-abc", None),
        ("POST", "/v1/sessions/s-abc/exec", {"shell": "echo"}),
        ("POST", "/v1/sessions/s-abc/files", {"files": [{"path": "a", "content": "x"}]}),
        ("GET", "/v1/sessions/s-abc/files?path=a", None),
        ("GET", "/v1/sessions/s-abc/files/list", None),
        ("POST", "/v1/batches", {"jobs": [{"id": "j1", "shell": "echo"}]}),
        ("GET", "/v1/batches/b-abc", None),
    ],
)
def test_every_route_answers_503_registry_unavailable(
    http: TestClient, method: str, path: str, body: Any
) -> None:
    http.app.dependency_overrides[current_tenant] = lambda: Tenant(name="acme")  # type: ignore[attr-defined]
    headers = {"Authorization": "Bearer sg_x", "Idempotency-Key": "key-0000001"}
    _unavailable(http.request(method, path, json=body, headers=headers))


def test_health_keeps_its_body(http: TestClient) -> None:
    r = http.get("/v1/health")
    assert r.status_code == 503
    assert r.json()["status"] == "unavailable" and r.json()["redis"] is False


def test_a_turn_the_broker_could_not_take_says_it_was_not_sent(down_settings: Settings) -> None:
    dispatcher = CeleryDispatcher(make_celery(down_settings))
    session = SessionInfo.model_validate(
        {
            "id": "s-x",
            "tenant": "acme",
            "type": "python",
            "quotas": {},
            "created_at": "2026-01-01T00:00:00Z",
            "last_used": "2026-01-01T00:00:00Z",
        }
    )
    job = TurnJob(turn_id="t-x", session=session, op=ExecOp(request=ExecRequest(shell="x")))
    with pytest.raises(SandgridError) as info:
        dispatcher.send(job, "sbx.python", expires=5)
    assert info.value.code == ErrorCode.REGISTRY_UNAVAILABLE
    assert info.value.context["turn_sent"] is False and info.value.http_status == 503
