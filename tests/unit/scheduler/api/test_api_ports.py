"""The port routes' checks on the in-process API (issue 21.1): what is refused before a
worker is reached, and where a session with no sandbox leads."""

from __future__ import annotations

from typing import Any

from sandgrid.wire.portkeys import port_key
from sandgrid.wire.preview import verify
from tests.support.fakes import Grid


def _session(grid: Grid) -> str:
    r = grid.http.post("/v1/sessions", json={}, headers=grid.headers())
    assert r.status_code == 201, r.text
    sid: str = r.json()["id"]
    return sid


def _url(grid: Grid, sid: str, port: int = 8000, **body: Any) -> Any:
    return grid.http.post(f"/v1/sessions/{sid}/ports/{port}/url", json=body, headers=grid.headers())


def test_a_url_is_signed_for_its_session_port_and_mode(grid: Grid) -> None:
    sid = _session(grid)
    r = _url(grid, sid, expires_in=60, read_only=True)
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["path"] == f"/p/{made['token']}/" and made["url"].endswith(made["path"])
    assert made["methods"] == ["GET", "HEAD"] and grid.token_a not in made["url"]
    preview = verify(port_key(grid.services.settings, "preview"), made["token"], "GET")
    assert (preview.session, preview.port, preview.read_only) == (sid, 8000, True)


def test_bad_input_is_422_naming_the_field(grid: Grid) -> None:
    sid = _session(grid)
    for port in (0, 65536):
        r = _url(grid, sid, port)
        assert r.status_code == 422 and "port" in r.text, r.text
    r = _url(grid, sid, 3128)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "port"
    r = _url(grid, sid, expires_in=10**9)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "expires_in"
    r = _url(grid, sid, expires_in=0)
    assert r.status_code == 422 and "expires_in" in r.text
    r = _url(grid, sid, surprise=1)
    assert r.status_code == 422 and "surprise" in r.text


def test_another_tenant_and_no_token(grid: Grid) -> None:
    sid = _session(grid)
    other = {"Authorization": f"Bearer {grid.token_b}"}
    assert grid.http.post(f"/v1/sessions/{sid}/ports/8000/url", headers=other).status_code == 404
    assert grid.http.get(f"/v1/sessions/{sid}/ports/8000/", headers=other).status_code == 404
    assert grid.http.get(f"/v1/sessions/{sid}/ports/8000/").status_code == 401


def test_forged_and_read_only_refusals_are_403(grid: Grid) -> None:
    sid = _session(grid)
    token = _url(grid, sid, read_only=True).json()["token"]
    r = grid.http.get(f"/p/{token[:-3]}xyz/")
    assert r.status_code == 403 and r.json()["error"]["code"] == "signature_invalid"
    r = grid.http.post(f"/p/{token}/form", content=b"x")
    assert r.status_code == 403 and r.json()["error"]["code"] == "method_not_allowed"


def test_a_session_in_no_sandbox_is_woken_on_every_way_in(grid: Grid) -> None:
    """A request to a session that runs nowhere makes a turn of it (it lands on a worker);
    this in-process worker serves no ports, so the answer is then its 503."""
    ways = (
        lambda sid, token: grid.http.get(
            f"/v1/sessions/{sid}/ports/8000/x", headers=grid.headers()
        ),
        lambda sid, token: grid.http.get(f"/p/{token}/x"),
        lambda sid, token: grid.http.get(f"/deep/path?sg_preview={token}&a=1"),
    )
    for way in ways:
        sid = _session(grid)
        token = _url(grid, sid).json()["token"]
        assert grid.services.registry.get("acme", sid).owner is None
        r = way(sid, token)
        assert r.status_code == 503 and r.json()["error"]["code"] == "worker_lost", r.text
        assert grid.services.registry.get("acme", sid).owner is not None  # woken
    r = grid.http.get(f"/p/{token}", follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == f"/p/{token}/"


def test_a_closed_sessions_url_is_404(grid: Grid) -> None:
    sid = _session(grid)
    token = _url(grid, sid).json()["token"]
    assert grid.http.delete(f"/v1/sessions/{sid}", headers=grid.headers()).status_code == 200
    assert grid.http.get(f"/p/{token}/").status_code == 404
    assert _url(grid, sid).status_code == 404
