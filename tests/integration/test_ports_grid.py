"""Exposed ports through the real grid (issue 21.1): API -> owning worker -> agent -> loopback.

On the grid of ``tests.support.ports_grid``. Servers run in the sandbox as
background processes (``python3 -m http.server``, and the stdlib servers of
``tests/support/port_servers.py``: a slow chunked stream, a POST echo, a
WebSocket echo) and are reached through ``/v1/sessions/{id}/ports/{port}/``
with the tenant's token and through signed preview URLs without it. The
refusals and caps are ``test_ports_limits_grid.py``.

The owner-change test kills a worker and runs last.
"""

from __future__ import annotations

import asyncio
import subprocess
import time

import httpx
import pytest
from agents.sandbox.errors import ExposedPortUnavailableError
from websockets.sync.client import connect

from sandgrid.client import AsyncClient, Client, Session
from sandgrid.errors import NotFound
from sandgrid.integrations.openai_agents import SandgridSandboxClient, SandgridSandboxClientOptions
from sandgrid.localgrid import LocalGrid
from tests.integration.test_shell_tmux import close_when_free
from tests.support import ports_grid
from tests.support.ports_grid import BIG_MB, NODES, OTHER_TOKEN, TOKEN, TYPES, http_server, serve

pytestmark = pytest.mark.integration

grid = ports_grid.grid
client = ports_grid.client
session = ports_grid.session


def test_http_server_through_the_route_and_a_signed_url(client: Client, session: Session) -> None:
    session.write_file("hello.txt", "hello from the sandbox\n")
    http_server(session)
    with session.http(8000) as h:
        r = h.get("hello.txt")
        assert r.status_code == 200 and r.text == "hello from the sandbox\n"
        listing = h.get("")
        assert "hello.txt" in listing.text
    url = session.port_url(8000, expires_in=120)
    assert TOKEN not in url.url and url.url.endswith("/") and url.port == 8000
    r = httpx.get(url.url + "hello.txt", timeout=30)  # no token at all
    assert r.status_code == 200 and r.text == "hello from the sandbox\n"
    bare = httpx.get(url.url.rstrip("/"), timeout=30, follow_redirects=False)
    assert bare.status_code == 308 and bare.headers["location"].endswith("/")


def test_no_listener_is_502_with_a_clear_body(session: Session) -> None:
    with session.http(8123) as h:
        r = h.get("")
    assert r.status_code == 502, r.text
    err = r.json()["error"]
    assert err["code"] == "port_not_listening" and "8123" in err["message"]


def test_streaming_post_and_headers(client: Client, session: Session) -> None:
    serve(session, "exec python3 /workspace/servers.py stream 8001", 8001)
    with session.http(8001, timeout=30) as h:
        t0 = time.monotonic()
        arrivals = []
        with h.stream("GET", "ticks?n=5&gap=0.4") as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line:
                    arrivals.append(time.monotonic() - t0)
        assert len(arrivals) == 5
        assert arrivals[0] < 1.2 and arrivals[-1] - arrivals[0] > 1.2, arrivals  # not buffered
        assert h.post("echo", content=b"x" * 5000).text == "echo:" + "x" * 5000
        assert h.put("echo", content=b"put").text == "echo:put"
        headers = h.get("headers").text
    assert "authorization" not in headers and TOKEN not in headers
    assert "host: 127.0.0.1:8001" in headers
    assert "x-forwarded-prefix: /v1/sessions/" in headers


def test_big_download_streams(session: Session) -> None:
    session.exec(shell=f"head -c {BIG_MB << 20} /dev/urandom > /workspace/big.bin")
    http_server(session)
    url = session.port_url(8000, read_only=True).url
    got, first = 0, None
    t0 = time.monotonic()
    with httpx.stream("GET", url + "big.bin", timeout=120) as r:
        assert r.status_code == 200
        assert int(r.headers["content-length"]) == BIG_MB << 20
        for chunk in r.iter_raw():
            first = first if first is not None else time.monotonic() - t0
            got += len(chunk)
    assert got == BIG_MB << 20
    assert first is not None and first < (time.monotonic() - t0) / 2  # bytes came as they went


def test_websocket_echo_with_token_and_url(client: Client, session: Session) -> None:
    serve(session, "exec python3 /workspace/servers.py ws 8002", 8002)
    base = client.base_url.replace("http://", "ws://")
    uri = f"{base}/v1/sessions/{session.id}/ports/8002/chat"
    with connect(uri, additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        ws.send("hello")
        assert ws.recv(timeout=10) == "hello"
        ws.send(b"\x00\x01binary")
        assert ws.recv(timeout=10) == b"\x00\x01binary"
    url = session.port_url(8002, read_only=True).url.replace("http://", "ws://")
    with connect(url + "chat", subprotocols=["chat.v1"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "chat.v1"
        ws.send("via url")
        assert ws.recv(timeout=10) == "via url"


def test_read_only_url_refuses_post_and_expiry(session: Session) -> None:
    serve(session, "exec python3 /workspace/servers.py stream 8001", 8001)
    ro = session.port_url(8001, read_only=True)
    assert ro.methods == ("GET", "HEAD") and ro.mode == "read_only"
    r = httpx.post(ro.url + "echo", content=b"no", timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "method_not_allowed"
    rw = session.port_url(8001, expires_in=2)
    assert httpx.post(rw.url + "echo", content=b"yes", timeout=30).text == "echo:yes"
    time.sleep(2.5)
    r = httpx.get(rw.url + "headers", timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "url_expired"


def test_closed_session_stops_its_urls(client: Client, grid: LocalGrid) -> None:
    s = client.session(type="python")
    http_server(s)
    url = s.port_url(8000).url
    assert httpx.get(url, timeout=30).status_code == 200
    close_when_free(client, s.id)
    r = httpx.get(url, timeout=30)
    assert r.status_code == 404, r.text


def _inbound(s: Session) -> int:
    return sum(1 for a in s.network().attempts if a.protocol == "inbound")


def test_a_revoked_url_is_403_and_a_new_one_works(grid: LocalGrid, session: Session) -> None:
    """Security.md PORT-8: a revoked URL is 403 without a port connection (none in the
    session's audit), a URL made after and another port's work; not another tenant's."""
    http_server(session)
    serve(session, "exec python3 /workspace/servers.py stream 8001", 8001)
    old, kept = session.port_url(8000), session.port_url(8001)
    assert httpx.get(old.url, timeout=30).status_code == 200
    with Client(grid.api_url, OTHER_TOKEN) as other, pytest.raises(NotFound):
        other.revoke_port_urls(session.id)
    assert httpx.get(old.url, timeout=30).status_code == 200
    assert session.revoke_port_urls(port=8000).port == 8000
    time.sleep(1.0)  # the served requests' attempts are recorded as their connections end
    before = _inbound(session)
    for url in (old.url, f"{grid.api_url}/?sg_preview={old.token}"):
        r = httpx.get(url, timeout=30)
        assert r.status_code == 403 and r.json()["error"]["code"] == "url_revoked", r.text
    assert _inbound(session) == before  # the worker never reached
    assert httpx.get(kept.url + "headers", timeout=30).status_code == 200
    new = session.port_url(8000)
    assert httpx.get(new.url, timeout=30).status_code == 200
    assert session.revoke_port_urls().port is None
    for url in (new.url, kept.url + "headers"):
        assert httpx.get(url, timeout=30).status_code == 403


def _running(node: str) -> int:
    """The node's running sandboxes (its warm pool: one per type here)."""
    out = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=sandgrid.worker={node}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return len(out.stdout.split())


def test_openai_agents_exposed_ports(grid: LocalGrid) -> None:
    """The Agents SDK provider: ``exposed_ports`` resolve to preview endpoints that reach
    the port with no token; a port not configured is the SDK's own refusal."""
    options = SandgridSandboxClientOptions(exposed_ports=(8000,), preview_ttl_s=300)

    async def main() -> None:
        async with (
            AsyncClient(grid.api_url, TOKEN) as sdk,
            await SandgridSandboxClient(client=sdk).create(options=options) as s,
        ):
            await s.exec("echo agents > /workspace/a.txt")
            await s.exec(
                "cd /workspace && nohup python3 -m http.server 8000 --bind 127.0.0.1 "
                ">/dev/null 2>&1 &"
            )
            endpoint = await s.resolve_exposed_port(8000)
            assert TOKEN not in endpoint.url_for("http")
            async with httpx.AsyncClient(timeout=30) as h:
                for _ in range(50):
                    r = await h.get(endpoint.url_for("http"))
                    if r.status_code != 502:
                        break
                    await asyncio.sleep(0.2)
                assert r.status_code == 200 and "a.txt" in r.text, r.text
            with pytest.raises(ExposedPortUnavailableError):
                await s.resolve_exposed_port(9000)

    asyncio.run(main())


def test_a_request_wakes_a_paused_session(client: Client) -> None:
    """A paused session runs nowhere; a request to its port makes a turn that brings it
    back: with its memory (gVisor), the server it had answers; from its workspace alone
    (runc), the answer is a clear 502 and the session is live again."""
    gv = client.session(type="python-gvisor")
    plain = client.session(type="python")
    try:
        for s in (gv, plain):
            s.write_file("a.txt", "kept\n")
            http_server(s)
        gv_url, plain_url = gv.port_url(8000).url, plain.port_url(8000).url
        assert gv.pause(memory=True).memory
        plain.pause()
        assert client.get_session(gv.id).owner is None
        r = httpx.get(gv_url + "a.txt", timeout=60)
        assert (r.status_code, r.text) == (200, "kept\n")  # the same server process
        with plain.http(8000, timeout=60) as h:
            r = h.get("/a.txt")
        assert r.status_code == 502 and r.json()["error"]["code"] == "port_not_listening"
        assert client.get_session(plain.id).owner in NODES
        r = httpx.get(plain_url + "a.txt", timeout=30)
        assert r.status_code == 502, r.text
    finally:
        close_when_free(client, gv.id)
        close_when_free(client, plain.id)


def test_url_survives_a_change_of_owner(client: Client, grid: LocalGrid) -> None:
    """The URL names the session: after its worker is killed, the session restores on the
    other worker and the same URL reaches the server started there."""
    s = client.session(type="python")
    try:
        s.write_file("where.txt", "before\n")
        http_server(s)
        url = s.port_url(8000).url
        assert httpx.get(url + "where.txt", timeout=30).text == "before\n"
        owner = client.get_session(s.id).owner
        assert owner in NODES
        grid.kill(owner)
        end = time.monotonic() + 60
        while client.get_session(s.id).owner == owner:
            assert time.monotonic() < end, "the lease never lapsed"
            time.sleep(0.5)
        r = httpx.get(url + "where.txt", timeout=30)  # wakes it on the other worker
        assert r.status_code == 502, r.text  # restored from its workspace: no server yet
        assert r.json()["error"]["code"] == "port_not_listening"
        assert client.get_session(s.id).owner not in (None, owner)
        s.exec(shell="echo after > /workspace/where.txt")
        http_server(s)
        assert httpx.get(url + "where.txt", timeout=30).text == "after\n"
    finally:
        close_when_free(client, s.id)
        grid.start_worker(owner or NODES[0], types=TYPES)
        # seen again: it has collected what its killed process left (orphans); and its
        # warm pool full, so that the module's teardown does not stop it mid-refill
        grid.wait(lambda: grid.workers_seen() >= set(NODES), "the restarted worker")
        grid.wait(lambda: _running(owner or NODES[0]) >= 2, "the restarted worker's pool")
