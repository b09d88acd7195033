"""Exposed ports' refusals through the real grid (issue 21.1, security.md PORT-1, 2, 4, 6).

The caps holding (connections open at once, bytes in all), another tenant's and
bad ports, forged and tampered preview tokens. The route's own behaviour
(streams, WebSockets, URLs, owner changes) is ``test_ports_grid.py``; both use
the grid of ``tests.support.ports_grid``.
"""

from __future__ import annotations

import http.client
import socket
import time

import httpx
import pytest

from sandgrid.client import Client, Session
from sandgrid.localgrid import LocalGrid
from tests.integration.test_shell_tmux import close_when_free
from tests.support import ports_grid
from tests.support.ports_grid import MAX_CONNECTIONS, OTHER_TOKEN, TOKEN, http_server, serve

pytestmark = pytest.mark.integration

grid = ports_grid.grid
client = ports_grid.client
session = ports_grid.session


def test_caps_hold(session: Session) -> None:
    http_server(session)
    serve(session, "exec python3 /workspace/servers.py stream 8001", 8001)
    session.exec(shell="head -c 50000000 /dev/zero > /workspace/z.bin")
    # connections: MAX_CONNECTIONS requests held open at once (the echo server reads
    # each body to its Content-Length, which never comes), the next is 429
    held = [_half_open(session, 8001, "echo") for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.5)
        with session.http(8000) as h:
            r = h.get("")
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "port_limit"
    finally:
        for sock in held:
            sock.close()
    time.sleep(1.0)
    # bytes: the second 50 MB download crosses MAX_BYTES and is cut; then 429
    with session.http(8000, timeout=120) as h:
        assert len(h.get("z.bin").content) == 50_000_000
        with pytest.raises(httpx.HTTPError):
            h.get("z.bin").raise_for_status()
        time.sleep(0.5)
        r = h.get("")
        assert r.status_code == 429 and "bytes" in r.json()["error"]["message"]
    audit = session.network()
    inbound = [a for a in audit.attempts if a.protocol == "inbound"]
    assert inbound and any(not a.allowed for a in inbound)
    assert any(a.reason.startswith("cut") for a in inbound)


def _half_open(s: Session, port: int, path: str) -> socket.socket:
    """A POST whose body never finishes: a server that reads it holds one port
    connection open."""
    host, p = s.client.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(p)), timeout=10)
    head = (
        f"POST /v1/sessions/{s.id}/ports/{port}/{path} HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Length: 1000000\r\n\r\n"
    )
    sock.sendall(head.encode() + b"x" * 100)
    return sock


def test_cross_tenant_and_bad_ports(grid: LocalGrid, session: Session) -> None:
    with Client(grid.api_url, OTHER_TOKEN) as other:
        base = f"{grid.api_url}/v1/sessions/{session.id}/ports/8000/"
        r = httpx.get(base, headers={"Authorization": f"Bearer {OTHER_TOKEN}"}, timeout=30)
        assert r.status_code == 404
        r = httpx.post(base + "url", headers={"Authorization": f"Bearer {OTHER_TOKEN}"}, timeout=30)
        assert r.status_code == 404
        del other
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for bad in ("0", "65536", "-1"):
        r = httpx.get(f"{grid.api_url}/v1/sessions/{session.id}/ports/{bad}/", headers=auth)
        assert r.status_code == 422 and "port" in r.text, (bad, r.text)
    r = httpx.get(f"{grid.api_url}/v1/sessions/{session.id}/ports/3128/", headers=auth)
    assert r.status_code == 422 and "reserved" in r.text
    assert httpx.get(f"{grid.api_url}/v1/sessions/{session.id}/ports/8000/").status_code == 401


def test_forged_and_tampered_urls_are_403_without_the_sandbox(
    client: Client, session: Session
) -> None:
    """Adversarial (security.md PORT-1..3): a tampered signature, a token moved to another
    port or session, a path that tries to leave the prefix."""
    http_server(session)
    good = session.port_url(8000)
    payload, sig = good.token.split(".")
    other = client.session(type="python")
    try:
        other_url = other.port_url(8000)
        o_payload = other_url.token.split(".")[0]
        forged = [
            f"{payload}.{sig[:-2]}AA",  # tampered signature
            f"{o_payload}.{sig}",  # another session's payload under this signature
            f"{payload}x.{sig}",  # a payload changed
            "eyJ2IjoxfQ.bm9wZQ",  # made up
        ]
        for token in forged:
            r = httpx.get(f"{client.base_url}/p/{token}/", timeout=30)
            assert r.status_code == 403, (token, r.text)
            assert r.json()["error"]["code"] == "signature_invalid"
        # the path stays under the port: '..' cannot reach the API's own routes
        # (sent raw: an HTTP client would normalise the dots away before sending)
        host, port = client.base_url.removeprefix("http://").split(":")
        for path in ("../../v1/sessions", "%2e%2e/%2e%2e/v1/health", "..%2f..%2fv1/health"):
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            conn.request("GET", good.path + path)
            r = conn.getresponse()
            body = r.read().decode(errors="replace")
            conn.close()
            assert r.status in (200, 404), (path, r.status, body)
            assert '"sessions"' not in body and '"workers"' not in body, body
        # the query form reaches the port's root
        r = httpx.get(f"{client.base_url}/?sg_preview={good.token}", timeout=30)
        assert r.status_code == 200 and "Directory listing" in r.text
    finally:
        close_when_free(client, other.id)
