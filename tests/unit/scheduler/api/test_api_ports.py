"""The port routes' checks on the in-process API (issue 21.1): what is refused before a
worker is reached, and where a session with no sandbox leads."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from sandgrid.errors import InvalidInput
from sandgrid.wire.portkeys import port_key
from sandgrid.wire.preview import verify
from scheduler.ports import tunnel
from scheduler.registry import sessions
from tests.support.fakes import Grid
from tests.support.port_listener import PortListener


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


# ---- revocation: DELETE /v1/sessions/{id}/ports/urls -------------------------------


@pytest.fixture
def listener(grid: Grid) -> Iterator[PortListener]:
    """The fake worker's listener, named in its heartbeat (a session it runs a turn of
    is then reached through it)."""
    tunnel._owners.clear()
    served = PortListener()
    yield served
    served.shutdown()
    served.server_close()
    tunnel._owners.clear()


def _running(grid: Grid, listener: PortListener) -> str:
    """A session the fake worker owns, its listener in its heartbeat."""
    sid = _session(grid)
    r = grid.http.post(f"/v1/sessions/{sid}/exec", json={"argv": ["true"]}, headers=grid.headers())
    assert r.status_code == 200, r.text
    ledger = grid.services.registry.ledger
    ledger.heartbeat(grid.worker.node, 30, ports_addr=listener.addr)
    return sid


def _revoke(grid: Grid, sid: str, port: int | None = None, token: str | None = None) -> Any:
    params = {} if port is None else {"port": port}
    return grid.http.delete(
        f"/v1/sessions/{sid}/ports/urls", params=params, headers=grid.headers(token)
    )


def test_a_revoked_url_is_403_without_the_sandbox_and_a_new_one_works(
    grid: Grid, listener: PortListener
) -> None:
    sid = _running(grid, listener)
    old = _url(grid, sid).json()["url"]
    assert grid.http.get(old + "x").text == "port 8000"
    r = _revoke(grid, sid)
    assert r.status_code == 200, r.text
    assert r.json() == {"v": 1, "session": sid, "port": None, "epochs": {"*": 1}}
    seen = listener.hellos
    for way in (old + "x", old.replace("/p/", "/q?sg_preview=").rstrip("/")):
        r = grid.http.get(way)
        assert r.status_code == 403 and r.json()["error"]["code"] == "url_revoked", r.text
    with grid.http.websocket_connect(old.replace("http://testserver", "") + "ws") as ws:
        assert ws.receive_json()["error"]["code"] == "url_revoked"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 4403
    assert listener.hellos == seen  # the worker (and the sandbox) never reached
    new = _url(grid, sid).json()["url"]
    assert grid.http.get(new + "x").text == "port 8000"
    # the tenant's own route never takes a preview token, and is not revoked
    r = grid.http.get(f"/v1/sessions/{sid}/ports/8000/", headers=grid.headers())
    assert r.status_code == 200


def test_revoking_one_port_leaves_the_others(grid: Grid, listener: PortListener) -> None:
    sid = _running(grid, listener)
    a, b = _url(grid, sid, 8000).json()["url"], _url(grid, sid, 9000).json()["url"]
    r = _revoke(grid, sid, 8000)
    assert r.status_code == 200 and r.json()["epochs"] == {"8000": 1}
    assert grid.http.get(a).status_code == 403
    assert grid.http.get(b).text == "port 9000"
    again = _url(grid, sid, 8000).json()["url"]
    assert grid.http.get(again).text == "port 8000"
    assert _revoke(grid, sid).json()["epochs"] == {"*": 1}  # every port: b and again too
    assert {grid.http.get(u).status_code for u in (a, b, again)} == {403}
    info = grid.http.get(f"/v1/sessions/{sid}", headers=grid.headers()).json()
    assert info["port_url_epochs"] == {"*": 1}
    page = grid.http.get("/v1/audit", params={"session": sid}, headers=grid.headers()).json()
    revoked = [r["detail"] for r in page["records"] if r["action"] == "port_urls_revoke"]
    assert revoked == [{"port": "*"}, {"port": 8000}]  # newest first
    records = grid.services.registry.records
    assert records is not None  # a registry that lost its data re-learns the revocation
    stored = records.load("acme", sid)
    assert stored is not None and stored.session.port_url_epochs == {"*": 1}


def test_the_revocation_check_rides_the_owner_lookup(
    grid: Grid, listener: PortListener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preview request reads the session once, as before revocation existed (the
    owner's lookup), and not at all while the owner is cached; a refused one reads it
    once (nothing is cached of it, as of a closed session's URL)."""
    sid = _running(grid, listener)
    url = _url(grid, sid).json()["url"]
    ledger = grid.services.registry.ledger
    reads: list[str] = []
    real = ledger.get_any
    monkeypatch.setattr(ledger, "get_any", lambda i, **kw: reads.append(i) or real(i, **kw))
    tunnel._owners.clear()
    assert [grid.http.get(url).status_code, grid.http.get(url).status_code] == [200, 200]
    assert reads == [sid]
    grid.services.registry.revoke_port_urls(sid, None)  # as another API process would
    tunnel._owners.clear()
    assert [grid.http.get(url).status_code, grid.http.get(url).status_code] == [403, 403]
    assert reads == [sid, sid, sid]


def test_revoking_is_the_tenants_alone_and_checks_its_input(grid: Grid) -> None:
    sid = _session(grid)
    token = _url(grid, sid).json()["token"]
    for port in (None, 8000):
        r = _revoke(grid, sid, port, token=grid.token_b)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert grid.services.registry.get("acme", sid).port_url_epochs == {}
    assert _revoke(grid, "s-nope").status_code == 404
    r = grid.http.delete(f"/v1/sessions/{sid}/ports/urls")
    assert r.status_code == 401
    for port in (0, 65536, 3128):
        r = _revoke(grid, sid, port)
        assert r.status_code == 422 and "port" in r.text, r.text
    preview = verify(port_key(grid.services.settings, "preview"), token, "GET")
    assert preview.epochs == (0, 0)
    assert grid.http.delete(f"/v1/sessions/{sid}", headers=grid.headers()).status_code == 200
    assert _revoke(grid, sid).status_code == 404  # closed


def test_the_ports_with_their_own_epoch_are_capped(
    grid: Grid, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sessions, "MAX_PORT_EPOCHS", 2)
    sid = _session(grid)
    assert _revoke(grid, sid, 8000).status_code == 200
    assert _revoke(grid, sid, 8001).status_code == 200
    assert _revoke(grid, sid, 8000).status_code == 200  # one it has already
    r = _revoke(grid, sid, 8002)
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "port"
    assert _revoke(grid, sid).json()["epochs"] == {"*": 1}  # every port's: room again
    assert _revoke(grid, sid, 8002).status_code == 200


def test_the_token_carries_no_tenant_secret(grid: Grid) -> None:
    sid = _session(grid)
    _revoke(grid, sid, 8000)
    made = _url(grid, sid).json()
    payload = made["token"].split(".")[0]
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert body["g"] == [0, 1] and set(body) == {"v", "t", "s", "p", "e", "m", "g"}
    text = json.dumps(body) + made["url"]
    settings = grid.services.settings
    key = port_key(settings, "preview")
    secrets = (grid.token_a, settings.minio.secret_key, key.hex(), base64.b64encode(key).decode())
    assert all(secret not in text for secret in secrets if secret)
    assert body["t"] == "acme" and body["s"] == sid  # what the URL's holder may reach anyway


def test_the_sdk_revokes_a_sessions_urls(grid: Grid, listener: PortListener) -> None:
    with grid.client() as c:
        s = c.session()
        s.exec(["true"])
        grid.services.registry.ledger.heartbeat(grid.worker.node, 30, ports_addr=listener.addr)
        a, b = s.port_url(8000).url, s.port_url(9000).url
        assert s.revoke_port_urls(port=8000).epochs == {"8000": 1}
        assert [grid.http.get(u).status_code for u in (a, b)] == [403, 200]
        done = c.revoke_port_urls(s.id)
        assert (done.session, done.port, done.epochs) == (s.id, None, {"*": 1})
        assert grid.http.get(b).status_code == 403
        with pytest.raises(InvalidInput):
            s.revoke_port_urls(port=0)
