"""Lifecycle routes over a real Redis and the fake worker: checkpoints, pause, TTL, filters."""

from __future__ import annotations

import time
from typing import Any

from scheduler.expiry import Expiry
from tests.support.fakes import Grid


def _session(grid: Grid, **body: Any) -> dict[str, Any]:
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 201, r.text
    return dict(r.json())


def _write(grid: Grid, sid: str, content: str) -> None:
    files = [{"path": "f", "content": content}]
    r = grid.http.post(f"/v1/sessions/{sid}/files", json={"files": files}, headers=grid.headers())
    assert r.status_code == 200, r.text


def test_checkpoint_list_restore_delete(grid: Grid) -> None:
    sid = _session(grid)["id"]
    base = f"/v1/sessions/{sid}"
    _write(grid, sid, "one")
    r = grid.http.post(f"{base}/checkpoints", json={"name": "c1"}, headers=grid.headers())
    assert r.status_code == 201 and r.json()["name"] == "c1"
    again = grid.http.post(f"{base}/checkpoints", json={"name": "c1"}, headers=grid.headers())
    assert again.status_code == 409 and again.json()["error"]["code"] == "checkpoint_exists"
    _write(grid, sid, "two")
    r = grid.http.post(f"{base}/restore", json={"checkpoint": "c1"}, headers=grid.headers())
    assert r.status_code == 200 and r.json()["checkpoint"] == "c1"
    assert grid.worker.files[(sid, "f")] == "one"
    listed = grid.http.get(f"{base}/checkpoints", headers=grid.headers()).json()
    assert [c["name"] for c in listed["checkpoints"]] == ["c1"]
    assert grid.http.delete(f"{base}/checkpoints/c1", headers=grid.headers()).status_code == 204
    gone = grid.http.delete(f"{base}/checkpoints/c1", headers=grid.headers())
    assert gone.status_code == 404


def test_bad_checkpoint_names_are_422_naming_the_field(grid: Grid) -> None:
    sid = _session(grid)["id"]
    for bad in ("", "-x", "a/b", "x" * 49):
        r = grid.http.post(
            f"/v1/sessions/{sid}/checkpoints", json={"name": bad}, headers=grid.headers()
        )
        assert r.status_code == 422, bad
        assert r.json()["error"]["context"]["field"] == "name"
    r = grid.http.post("/v1/sessions", json={"checkpoint": "c1"}, headers=grid.headers())
    assert r.status_code == 422 and "fork_from" in r.json()["error"]["message"]


def test_pause_without_a_sandbox_answers_without_a_turn(grid: Grid) -> None:
    sid = _session(grid)["id"]
    sent = len(grid.worker.sent)
    r = grid.http.post(f"/v1/sessions/{sid}/pause", headers=grid.headers())
    assert r.status_code == 200 and r.json()["released"] is False
    assert len(grid.worker.sent) == sent


def test_list_filters_by_label_and_state(grid: Grid) -> None:
    a = _session(grid, labels={"team": "red", "env": "ci"})["id"]
    _session(grid, labels={"team": "blue"})
    r = grid.http.get("/v1/sessions?label=team=red&label=env=ci", headers=grid.headers())
    assert [s["id"] for s in r.json()["sessions"]] == [a]
    r = grid.http.get("/v1/sessions?state=new&label=team=red", headers=grid.headers())
    assert [s["id"] for s in r.json()["sessions"]] == [a]
    assert grid.http.get("/v1/sessions?state=live", headers=grid.headers()).json() == {
        "v": 1,
        "sessions": [],
    }
    bad = grid.http.get("/v1/sessions?label=nokey", headers=grid.headers())
    assert bad.status_code == 422 and bad.json()["error"]["context"]["field"] == "label"


def test_ttl_limits_are_enforced(grid: Grid) -> None:
    for body in ({"idle_timeout_s": 0}, {"max_lifetime_s": 31 * 86400}):
        r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
        assert r.status_code == 422


def test_an_idle_session_expires_on_access_and_by_the_sweep(grid: Grid) -> None:
    expiry: Expiry = grid.app.state.expiry
    swept = _session(grid, idle_timeout_s=1)["id"]
    looked_at = _session(grid, max_lifetime_s=1)["id"]
    kept = _session(grid, idle_timeout_s=3600)["id"]
    time.sleep(1.1)
    turn = grid.http.post(
        f"/v1/sessions/{swept}/exec", json={"argv": ["true"]}, headers=grid.headers()
    )
    assert turn.status_code == 409 and turn.json()["error"]["context"]["expired"] is True
    shown = grid.http.get(f"/v1/sessions/{looked_at}", headers=grid.headers()).json()
    assert shown["state"] == "expired" and shown["expired_at"]
    assert expiry.sweep() == 1
    assert grid.http.get(f"/v1/sessions/{swept}", headers=grid.headers()).json()["state"] == (
        "expired"
    )
    assert grid.http.get(f"/v1/sessions/{kept}", headers=grid.headers()).json()["state"] == "new"
    listed = grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"]
    assert [s["id"] for s in listed] == [kept]
