"""The ``browser`` sandbox type on the real grid, under runsc (issue 21.3-21.4, docs/browser.md).

A grid of its own (API and one worker serving ``browser``), on the batch grid's
port and Redis database (one integration run at a time). A page is served in
the sandbox (``python3 -m http.server``) and driven from outside with
Playwright over CDP (``connect_over_cdp``, no browser on the client side): it
loads, a form is filled, a screenshot decodes to a PNG of the viewport's size
and a PDF is printed. A page on a host of the test's own (127.0.0.7) loads only
for a session whose policy allows it. The MCP server's browser tools drive the
same browser.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from mcp import ClientSession
from mcp_types import ImageContent
from playwright.sync_api import sync_playwright

from sandgrid.client import Client, Session
from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names
from sandgrid.wire.browser import BROWSER_TYPE, CDP_PORT
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.integration.test_agentscope import agentscope_python  # noqa: F401 - a fixture
from tests.integration.test_mcp import _with_mcp
from tests.integration.test_shell_tmux import close_when_free
from tests.support.grid_fixtures import API_PORT, REDIS_URL, own_grid
from tests.support.ports_grid import http_server

pytestmark = [pytest.mark.integration, pytest.mark.runsc]

TOKEN = "tok-browse-" + "b" * 24
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODES = ["browser-w1"]
BROWSER_CLIENT = Path(__file__).parents[1] / "support" / "agentscope_browser_client.py"
OUTSIDE = "127.0.0.7"
OUTSIDE_PORT = 8089
SECRET = "outside-secret-page"
#: Chromium and its renderers under gVisor: a page needs more than the default 512 MiB.
MEMORY_MB = 1024
FORM = """<!doctype html><html><head><title>Form page</title></head><body>
<h1>Sign up</h1>
<form id="f" onsubmit="document.getElementById('out').textContent =
  'hello ' + document.getElementById('name').value; return false;">
<label for="name">Name</label><input id="name" name="name">
<button id="go" type="submit">Send</button></form>
<p id="out">nothing yet</p></body></html>
"""


class _Secret(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"<html><title>outside</title><body>{SECRET}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    """One worker serving ``browser``; the tenant (seeded once the grid is up, the
    token store reads Redis per new token) may allow the test's own host."""
    outside = ThreadingHTTPServer((OUTSIDE, OUTSIDE_PORT), _Secret)
    threading.Thread(target=outside.serve_forever, daemon=True).start()
    work = tmp_path_factory.mktemp("browsergrid")
    try:
        with own_grid(
            work, port=API_PORT, redis_url=REDIS_URL, tenants={}, nodes=NODES, types=BROWSER_TYPE
        ) as g:
            tenant = Tenant(name="browse", limits=TenantLimits(network_ceiling=[OUTSIDE]))
            r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
            r.hset(names.tokens_key(), hash_token(TOKEN), tenant.model_dump_json())
            r.close()
            yield g
    finally:
        outside.shutdown()


@pytest.fixture
def client(grid: LocalGrid) -> Iterator[Client]:
    with Client(grid.api_url, TOKEN, timeout=120) as c:
        yield c


def _open(client: Client, network: dict[str, Any] | None = None) -> Session:
    s = client.session(type=BROWSER_TYPE, quotas={"memory_mb": MEMORY_MB}, network=network)
    s.write_file("form.html", FORM)
    http_server(s)
    return s


@pytest.fixture
def session(client: Client) -> Iterator[Session]:
    s = _open(client)
    yield s
    close_when_free(client, s.id)


def cdp(grid: LocalGrid, session_id: str, **params: Any) -> dict[str, Any]:
    url = f"{grid.api_url}/v1/sessions/{session_id}/cdp"
    r = httpx.get(url, params=params, headers=AUTH, timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_playwright_drives_a_page_served_in_the_sandbox(grid: LocalGrid, session: Session) -> None:
    endpoint = cdp(grid, session.id)
    assert endpoint["port"] == CDP_PORT and endpoint["browser"].startswith("Chrome/")
    assert endpoint["websocket_url"].startswith("ws://") and TOKEN not in endpoint["websocket_url"]
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(endpoint["websocket_url"], headers=AUTH)
        page = browser.contexts[0].new_page()
        page.set_viewport_size({"width": 800, "height": 600})
        page.goto("http://127.0.0.1:8000/form.html")
        assert page.title() == "Form page"
        page.fill("#name", "grid")
        page.click("#go")
        assert page.text_content("#out") == "hello grid"
        shot = page.screenshot()
        assert png_size(shot) == (800, 600)
        pdf = page.pdf()
        assert pdf.startswith(b"%PDF-")
        browser.close()


def test_a_signed_cdp_url_needs_no_token(grid: LocalGrid, session: Session) -> None:
    endpoint = session.cdp(signed=True, expires_in=60)  # the SDK's call
    assert endpoint.signed and "/p/" in endpoint.websocket_url
    assert endpoint.expires_at and TOKEN not in endpoint.websocket_url
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(endpoint.websocket_url)
        page = browser.contexts[0].new_page()
        page.goto("http://127.0.0.1:8000/form.html")
        assert page.title() == "Form page"
        browser.close()


def _visit(grid: LocalGrid, s: Session, url: str) -> str:
    """What the page at ``url`` shows in the session's browser (or why it did not load)."""
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(cdp(grid, s.id)["websocket_url"], headers=AUTH)
        page = browser.contexts[0].new_page()
        try:
            page.goto(url, timeout=20_000)
            return page.content()
        except Exception as exc:  # a refused load is what the test wants
            return f"error: {exc}"
        finally:
            browser.close()


def test_the_browser_follows_the_sessions_egress_policy(grid: LocalGrid, client: Client) -> None:
    url = f"http://{OUTSIDE}:{OUTSIDE_PORT}/"
    offline = _open(client)
    try:
        assert SECRET not in _visit(grid, offline, url)
        # The grid's Redis and API, from the page: the sandbox's loopback is its own.
        assert "redis_version" not in _visit(grid, offline, "http://127.0.0.1:6379/INFO")
    finally:
        close_when_free(client, offline.id)
    allowed = _open(client, network={"allow": [OUTSIDE]})
    try:
        assert SECRET in _visit(grid, allowed, url)
    finally:
        close_when_free(client, allowed.id)


def test_cdp_of_another_tenants_session_is_404(grid: LocalGrid, session: Session) -> None:
    r = httpx.get(
        f"{grid.api_url}/v1/sessions/{session.id}/cdp",
        headers={"Authorization": "Bearer tok-nobody-" + "z" * 24},
        timeout=30,
    )
    assert r.status_code in (401, 404), r.text
    assert json.loads(r.text)["error"]["code"] in ("unauthenticated", "not_found")


def test_mcp_browser_tools(grid: LocalGrid, session: Session) -> None:
    async def body(mcp: ClientSession) -> None:
        sid = {"session_id": session.id}
        names = {t.name for t in (await mcp.list_tools()).tools}
        assert {"browser_navigate", "browser_screenshot", "browser_snapshot"} <= names
        nav = await mcp.call_tool(
            "browser_navigate", {**sid, "url": "http://127.0.0.1:8000/form.html"}
        )
        assert not nav.is_error, nav.content
        assert nav.structured_content and nav.structured_content["title"] == "Form page"
        snap = await mcp.call_tool("browser_snapshot", sid)
        text = snap.content[0].text  # type: ignore[union-attr]
        assert 'heading "Sign up"' in text and "textbox" in text, text
        box = next(line for line in text.splitlines() if "textbox" in line)
        ref = box.rsplit("[ref=", 1)[1].rstrip("]")
        typed = await mcp.call_tool("browser_type", {**sid, "ref": ref, "text": "mcp"})
        assert not typed.is_error, typed.content
        clicked = await mcp.call_tool("browser_click", {**sid, "selector": "#go"})
        assert not clicked.is_error, clicked.content
        after = await mcp.call_tool("browser_snapshot", sid)
        assert "hello mcp" in after.content[0].text  # type: ignore[union-attr]
        shot = await mcp.call_tool("browser_screenshot", sid)
        image = shot.content[0]
        assert isinstance(image, ImageContent) and image.mime_type == "image/png"
        assert png_size(base64.b64decode(image.data))[0] > 0
        bad = await mcp.call_tool("browser_click", {**sid, "selector": "#missing"})
        assert bad.is_error and "no element matches" in bad.content[0].text  # type: ignore[union-attr]

    _with_mcp(grid, body, token=TOKEN)


def test_agentscope_browser_sandbox_unchanged(
    grid: LocalGrid,
    agentscope_python: Path,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    """agentscope-runtime's own BrowserSandbox, its browser_* tools on the browser type."""
    out = tmp_path / "out.json"
    argv = [str(agentscope_python), str(BROWSER_CLIENT), grid.api_url, TOKEN, str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, f"{proc.stderr[-4000:]}\n{grid.logs()}"
    ran = json.loads(out.read_text())
    assert ran["sandbox_id"].startswith("s-") and "Scope form" in ran["navigate"]
    assert 'heading "Sign up"' in ran["snapshot"] and "[ref=e" in ran["snapshot"]
    assert ran["type"] is False and ran["click"] is False
    assert "hi scope" in ran["after"]
    assert ran["shot"] == {"type": "image", "mimeType": "image/png"}
    assert base64.b64decode(ran["shot_png"]).startswith(b"\x89PNG")
    assert ran["unserved"]["isError"] and "not served by sandgrid" in str(ran["unserved"])


HOG = "data:text/html,<script>let a=[];for(;;){a.push(new Array(1e6).fill(Math.random()))}</script>"


def test_a_page_that_allocates_without_bound_crashes_alone_with_a_clear_error(
    grid: LocalGrid, session: Session
) -> None:
    async def body(mcp: ClientSession) -> None:
        sid = {"session_id": session.id}
        hog = await mcp.call_tool("browser_navigate", {**sid, "url": HOG})
        assert hog.is_error, hog.content
        assert "page crashed" in hog.content[0].text  # type: ignore[union-attr]
        again = await mcp.call_tool(
            "browser_navigate", {**sid, "url": "http://127.0.0.1:8000/form.html"}
        )
        assert not again.is_error, again.content
        assert again.structured_content and again.structured_content["title"] == "Form page"

    _with_mcp(grid, body, token=TOKEN)
    assert session.exec(shell="echo alive").stdout == "alive\n"  # the sandbox lived on


def test_a_killed_browser_is_started_again(grid: LocalGrid, session: Session) -> None:
    first = cdp(grid, session.id)["websocket_url"]
    killed = session.exec(shell="pkill -KILL -o -x chromium; echo $?")
    assert killed.stdout.strip() == "0", killed
    for _ in range(120):  # the launcher starts Chromium again: a new browser id
        r = httpx.get(f"{grid.api_url}/v1/sessions/{session.id}/cdp", headers=AUTH, timeout=120)
        if r.status_code == 200 and r.json()["websocket_url"] != first:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no new browser after the kill: {r.status_code} {r.text}")
    exits = session.exec(shell="cat ~/.sandgrid-browser/exits").stdout
    assert exits.split()[-1] == "137", exits  # the kill, recorded by the launcher
