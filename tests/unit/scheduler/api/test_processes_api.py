"""The API of background processes, with no live owner: process_lost at once."""

from __future__ import annotations

from tests.support.fakes import Grid


def _session(grid: Grid) -> str:
    r = grid.http.post("/v1/sessions", json={"type": "python"}, headers=grid.headers())
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_no_live_owner_is_process_lost_and_an_empty_listing(grid: Grid) -> None:
    sid = _session(grid)
    base = f"/v1/sessions/{sid}/processes"
    listed = grid.http.get(base, headers=grid.headers())
    assert listed.status_code == 200 and listed.json()["processes"] == []
    for method, path, body in (
        ("GET", f"{base}/7/logs?since=3&sandbox=abc", None),
        ("POST", f"{base}/7/wait", {"timeout_s": 5}),
        ("POST", f"{base}/7/kill", {"signal": "KILL"}),
        ("POST", f"{base}/7/stdin", {"data": "x"}),
    ):
        r = grid.http.request(method, path, json=body, headers=grid.headers())
        assert r.status_code == 410 and r.json()["error"]["code"] == "process_lost", (path, r.text)
    assert grid.worker.sent == []  # answered at once: no message sent, no wait


def test_bad_bodies_name_the_field(grid: Grid) -> None:
    sid = _session(grid)
    base = f"/v1/sessions/{sid}/processes"
    r = grid.http.post(f"{base}/7/wait", json={"timeout_s": 11}, headers=grid.headers())
    assert r.status_code == 422 and "timeout_s" in r.text
    r = grid.http.post(f"{base}/7/kill", json={"signal": "STOP"}, headers=grid.headers())
    assert r.status_code == 422 and "signal" in r.text
    r = grid.http.get(f"{base}/7/logs?since=-1", headers=grid.headers())
    assert r.status_code == 422 and "since" in r.text


def test_another_tenants_session_is_404(grid: Grid) -> None:
    sid = _session(grid)
    r = grid.http.get(f"/v1/sessions/{sid}/processes", headers=grid.headers(grid.token_b))
    assert r.status_code == 404
