"""The audit trail through a real grid, on runc and on runsc (issue 23.14, 23.15).

A grid of its own (API and one worker serving ``python`` and ``python-gvisor``),
whose exporter moves every record to the store within a second
(``SANDGRID_AUDIT__STREAM_KEEP_S=0``), so reads span the stream and the store
while records arrive. One session per runtime runs an exec, a background start
fed on stdin and another killed, a ``run_code`` cell, a terminal opened and
closed, a file write, and an allowed and a refused egress connection (to a
loopback HTTP server on 127.0.0.23, which the session's policy names); then
``GET /v1/audit`` has each, newest first, with digest and head, and no output:
the marker the code prints (built at run time, so it is in no command) is in
no record. Everything stays on loopback.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandgrid.audit import AuditRecord
from sandgrid.client import Client
from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.integration.test_shell_tmux import WAIT_S, close_when_free
from tests.support.redis_db import fresh_db

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_AUDIT_API_PORT", "8723"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-auditco-" + "a" * 24
SERVER, REFUSED, HTTP_PORT = "127.0.0.23", "127.0.0.24", 8089
MARKER = "AUDIT-MARKER-42"
MAKE_MARKER = "'AUDIT' + '-MARKER-' + str(6 * 7)"  # prints MARKER; is not MARKER
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from loopback\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    work = tmp_path_factory.mktemp("auditgrid")
    r = fresh_db(REDIS_URL)
    limits = TenantLimits(network_ceiling=[SERVER, REFUSED])
    r.hset(
        names.tokens_key(),
        hash_token(TOKEN),
        Tenant(name="auditco", limits=limits).model_dump_json(),
    )
    server = http.server.ThreadingHTTPServer((SERVER, HTTP_PORT), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    g = LocalGrid(
        work / "grid",
        port=PORT,
        redis_url=REDIS_URL,
        tenants={},
        env={
            "SANDGRID_WORKER__POOL_SIZE": "1",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_WORKER__EGRESS__STATE_DIR": str(work / "egress"),
            "SANDGRID_AUDIT__STREAM_KEEP_S": "0",
            "SANDGRID_AUDIT__EXPORT_INTERVAL_S": "1",
        },
    )
    try:
        g.start(["audit-w1"], types="python,python-gvisor", concurrency=2)
        yield g
    finally:
        g.stop()
        server.shutdown()
        server.server_close()
        r.flushdb()
        r.close()


def _page(g: LocalGrid, **params: Any) -> dict[str, Any]:
    resp = httpx.get(
        f"{g.api_url}/v1/audit",
        params=params,
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _wait_for(client: Client, sid: str, done: Any) -> list[AuditRecord]:
    """The session's records (newest first) once ``done(records)`` holds."""
    end = time.monotonic() + WAIT_S
    while True:
        recs = list(client.audit_records(session=sid))
        if done(recs) or time.monotonic() > end:
            return recs
        time.sleep(0.5)


def _act(client: Client, kind: str) -> tuple[str, str]:
    """Every audited action once in a new session; its id and the exec's command."""
    policy = {"allow": [f"{SERVER}:{HTTP_PORT}"]}
    made = httpx.post(  # the SDK's network= is another item's (23.17)
        f"{client.base_url}/v1/sessions",
        json={"type": kind, "network": policy},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60,
    )
    assert made.status_code == 201, made.text
    s = client.attach(made.json()["id"])
    command = f'python3 -c "print({MAKE_MARKER})"'
    assert s.exec(shell=command).stdout == MARKER + "\n"
    fetch = "curl -sS -o /dev/null -w '%{http_code} ' http://"
    both = f"{fetch}{SERVER}:{HTTP_PORT}/; {fetch}{REFUSED}:{HTTP_PORT}/"
    out = s.exec(shell=both).stdout
    assert out.split() == ["200", "403"], out
    fed = client.start_process(s.id, shell=f'read line; python3 -c "print({MAKE_MARKER})"')
    assert fed.send_stdin(MARKER + "\n") == len(MARKER) + 1
    assert fed.wait(timeout=WAIT_S).exit_code == 0
    client.start_process(s.id, shell="sleep 300").kill()
    cell = s.run_code(f"print({MAKE_MARKER})")
    assert cell.stdout == MARKER + "\n", cell
    with s.pty() as term:
        term.read_until("/workspace$", WAIT_S)
        term.send(f'python3 -c "print({MAKE_MARKER})"\r')
        term.read_until(MARKER, WAIT_S)
        term.send("exit\r")
        while term.recv(timeout=WAIT_S) is not None:
            pass
    # The terminal's turn lets go of the session after its shell exits, then says so.
    _wait_for(client, s.id, lambda rs: "terminal_close" in {r.action for r in rs})
    s.write_file("notes.txt", MARKER)
    return s.id, command


@pytest.mark.parametrize("kind", RUNTIMES)
def test_every_action_is_audited_newest_first_without_output(grid: LocalGrid, kind: str) -> None:
    with Client(grid.api_url, TOKEN) as client:
        sid, command = _act(client, kind)
        want = {"terminal_close", "network", "write", "proc_kill"}
        recs = _wait_for(
            client, sid, lambda rs: want <= {r.action for r in rs} and _egress(rs) == 2
        )
        close_when_free(client, sid)
    ids = [tuple(map(int, r.id.split("-"))) for r in recs]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)  # newest first
    by = {a: [r for r in recs if r.action == a] for a in {r.action for r in recs}}
    oldest_first = [r.action for r in reversed(recs) if r.action != "network"]
    expected = ["session_create", "exec", "exec", "proc_start", "proc_stdin", "proc_start"]
    expected += ["proc_kill", "run_code", "terminal_open", "terminal_close", "write"]
    assert oldest_first == expected
    run = by["exec"][-1]  # the oldest exec: the one that printed the marker
    assert run.command_digest == "sha256:" + hashlib.sha256(command.encode()).hexdigest()
    assert run.command_head == command[:80] and run.exit_code == 0 and run.node == "audit-w1"
    cell = by["run_code"][0]
    assert cell.command_head == f"print({MAKE_MARKER})" and cell.command_digest
    assert by["proc_stdin"][0].bytes == len(MARKER) + 1
    assert by["write"][0].detail["path"] == "notes.txt" and by["write"][0].bytes == len(MARKER)
    assert by["terminal_close"][0].duration_ms and by["terminal_open"][0].turn
    net = {r.detail["host"]: r for r in by["network"]}
    ok, refused = net[SERVER], net[REFUSED]
    assert (ok.outcome, ok.detail["allowed"], ok.detail["port"]) == ("ok", True, HTTP_PORT)
    assert SERVER in str(ok.detail["rule"]) and ok.bytes and ok.bytes > 0
    assert (refused.outcome, refused.detail["allowed"]) == ("refused", False)
    for rec in (ok, refused):
        assert "lookup" not in rec.detail or isinstance(rec.detail["lookup"], bool)
    dumped = json.dumps(_page(grid, session=sid))
    assert MARKER not in dumped  # no output, stdin, file content or terminal text anywhere


def _egress(recs: list[AuditRecord]) -> int:
    return len([r for r in recs if r.action == "network"])


def test_the_cursor_pages_without_gaps_or_repeats_while_records_arrive(grid: LocalGrid) -> None:
    with Client(grid.api_url, TOKEN) as client, client.session(type="python") as s:
        for i in range(9):
            s.exec(shell=f"echo {i}")
        time.sleep(1.5)  # the exporter has moved them: pages read the store and the stream
        whole = [r["id"] for r in _page(grid, session=s.id, limit=1000)["records"]]
        assert len(whole) == 10  # the create and 9 execs
        first = _page(grid, session=s.id, limit=3)
        got, cursor = [r["id"] for r in first["records"]], first["next_cursor"]
        while cursor:
            s.exec(shell="echo late")  # newer than every page: never in this paging
            nxt = _page(grid, session=s.id, limit=3, cursor=cursor)
            got += [r["id"] for r in nxt["records"]]
            cursor = nxt["next_cursor"]
            assert nxt["more"] == (cursor is not None)
        assert got == whole
        asc, ids = _page(grid, session=s.id, limit=4, order="asc"), []
        while True:
            ids += [r["id"] for r in asc["records"]]
            if not asc["next_cursor"]:
                break
            asc = _page(grid, session=s.id, limit=4, cursor=asc["next_cursor"])
        late = len(ids) - len(whole)
        assert ids[: len(whole)] == whole[::-1] and late == 3  # oldest first: the late ones last
        sdk = [r.id for r in client.audit_records(session=s.id, limit=2)]
        assert sdk == ids[::-1]
