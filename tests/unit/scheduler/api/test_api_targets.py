"""``GET /v1/metrics/targets``: Prometheus HTTP service discovery, operators only (23.18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fakes import Grid

ROUTE = "/v1/metrics/targets"
METRICS_TOKEN = "sgm_test-metrics-token"


@pytest.fixture
def token_file(grid: Grid, tmp_path: Path) -> Path:
    path = tmp_path / "metrics-token"
    path.write_text(METRICS_TOKEN + "\n")
    grid.services.settings.metrics_token_file = path
    return path


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_live_node_is_a_target_group(grid: Grid, token_file: Path) -> None:
    ledger = grid.services.registry.ledger
    ledger.heartbeat("w1", 30, types=["python"], metrics_port=9810, metrics_host="127.0.0.1")
    ledger.heartbeat("w2", 30, types=["python"], metrics_port=41234, metrics_host="127.0.0.1")
    ledger.heartbeat("old", 30, types=["python"])  # names no port: left out
    r = grid.http.get(ROUTE, headers=_auth(METRICS_TOKEN))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json() == [
        {"targets": ["127.0.0.1:9810"], "labels": {"node": "w1", "__metrics_path__": "/metrics"}},
        {"targets": ["127.0.0.1:41234"], "labels": {"node": "w2", "__metrics_path__": "/metrics"}},
    ]


def test_an_ipv6_host_is_bracketed(grid: Grid, token_file: Path) -> None:
    grid.services.registry.ledger.heartbeat("w6", 30, metrics_port=9810, metrics_host="::1")
    r = grid.http.get(ROUTE, headers=_auth(METRICS_TOKEN))
    assert r.json()[0]["targets"] == ["[::1]:9810"]


def test_no_token_a_wrong_one_or_a_tenants_is_refused(grid: Grid, token_file: Path) -> None:
    """Adversarial: a tenant's valid token does not open the operators' route."""
    assert grid.http.get(ROUTE).status_code == 401
    assert grid.http.get(ROUTE, headers=_auth("sgm_wrong")).status_code == 401
    r = grid.http.get(ROUTE, headers=_auth(grid.token_a))
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_without_a_configured_token_every_call_is_refused(grid: Grid, tmp_path: Path) -> None:
    grid.services.settings.metrics_token_file = None
    r = grid.http.get(ROUTE, headers=_auth(METRICS_TOKEN))
    assert r.status_code == 401 and "SANDGRID_METRICS_TOKEN_FILE" in r.json()["error"]["message"]
    empty = tmp_path / "empty"
    empty.write_text("\n")
    grid.services.settings.metrics_token_file = empty
    assert grid.http.get(ROUTE, headers=_auth("")).status_code == 401
    grid.services.settings.metrics_token_file = tmp_path / "missing"
    assert grid.http.get(ROUTE, headers=_auth(METRICS_TOKEN)).status_code == 401


def test_a_rotated_token_applies_at_once(grid: Grid, token_file: Path) -> None:
    token_file.write_text("sgm_rotated\n")
    assert grid.http.get(ROUTE, headers=_auth(METRICS_TOKEN)).status_code == 401
    assert grid.http.get(ROUTE, headers=_auth("sgm_rotated")).status_code == 200
