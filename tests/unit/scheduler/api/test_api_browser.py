"""``GET /v1/sessions/{id}/cdp`` in-process (real Redis, a fake worker): its refusals."""

from __future__ import annotations

from tests.support.fakes import Grid


def test_cdp_refuses_other_types_tenants_and_bad_input(grid: Grid) -> None:
    r = grid.http.post("/v1/sessions", json={}, headers=grid.headers())
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    r = grid.http.get(f"/v1/sessions/{sid}/cdp", headers=grid.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["context"]["field"] == "type" and "'python'" in err["message"]
    other = {"Authorization": f"Bearer {grid.token_b}"}
    assert grid.http.get(f"/v1/sessions/{sid}/cdp", headers=other).status_code == 404
    assert grid.http.get(f"/v1/sessions/{sid}/cdp").status_code == 401
    r = grid.http.get(f"/v1/sessions/{sid}/cdp?expires_in=0", headers=grid.headers())
    assert r.status_code == 422 and "expires_in" in r.text
