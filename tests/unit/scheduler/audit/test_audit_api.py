"""``GET /v1/audit`` in-process (a fake worker): newest first, the cursor, 422s; the SDK too."""

from __future__ import annotations

from tests.support.fakes import Grid

MARKER = "MARKER-printed-never-audited"


def _session(grid: Grid) -> str:
    with grid.client() as client:
        return client.create_session("python").id


def test_newest_first_then_paged_by_the_cursor(grid: Grid) -> None:
    sid = _session(grid)
    with grid.client() as client:
        for i in range(6):
            client.exec(sid, shell=f"echo {MARKER} {i}")
        client.write_files(sid, {"a.txt": MARKER})
        page = client.audit(session=sid, limit=3)
        assert [r.action for r in page.records] == ["write", "exec", "exec"]
        assert page.more and page.next_cursor and page.order == "desc"
        every = list(client.audit_records(session=sid, limit=3))
        assert [r.action for r in every] == ["write", *["exec"] * 6, "session_create"]
        assert len({r.id for r in every}) == len(every)
        oldest = list(client.audit_records(session=sid, limit=2, order="asc"))
        assert oldest == every[::-1]
        execs = list(client.audit_records(action="exec", limit=4))
        assert execs[0].command_head == f"echo {MARKER} 5"[:80]
    resp = grid.http.get("/v1/audit", headers=grid.headers())
    assert MARKER + "\n" not in resp.text  # a command's head, never its output


def test_bad_order_cursor_or_action_is_422_naming_the_field(grid: Grid) -> None:
    sid = _session(grid)
    for params, field in (
        ({"order": "sideways"}, "order"),
        ({"action": "dance"}, "action"),
        ({"cursor": "not-a-cursor"}, "cursor"),
    ):
        resp = grid.http.get("/v1/audit", params=params, headers=grid.headers())
        assert resp.status_code == 422 and field in resp.text, resp.text
    with grid.client() as client:
        client.exec(sid, shell="true")
        cursor = client.audit(limit=1).next_cursor
    resp = grid.http.get(
        "/v1/audit", params={"cursor": cursor, "session": sid}, headers=grid.headers()
    )
    assert resp.status_code == 422 and resp.json()["error"]["context"]["field"] == "cursor"


def test_a_policy_change_is_audited(grid: Grid) -> None:
    tok = grid.add_tenant("netco", network_ceiling=["*"])
    resp = grid.http.post("/v1/sessions", json={"type": "python"}, headers=grid.headers(tok))
    sid = resp.json()["id"]
    patched = grid.http.patch(
        f"/v1/sessions/{sid}/network", json={"allow": ["pypi.org"]}, headers=grid.headers(tok)
    )
    assert patched.status_code == 200, patched.text
    page = grid.http.get("/v1/audit", params={"limit": 1}, headers=grid.headers(tok)).json()
    assert page["records"][0]["action"] == "network_policy"
    assert page["records"][0]["detail"] == {"allow": 1}


def test_another_tenants_cursor_shows_only_the_callers_records(grid: Grid) -> None:
    sid = _session(grid)
    with grid.client() as client:
        for _ in range(3):
            client.exec(sid, shell="true")
        cursor = client.audit(limit=1).next_cursor
    with grid.client(grid.token_b) as other:
        page = other.audit(cursor=cursor)
        assert page.records == [] and other.audit().records == []
        assert list(other.audit_records(session=sid)) == []
