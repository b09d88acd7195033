"""The API's input (issue 23.13): unknown fields, bodies that take none, bodies that are not JSON.

Over a real Redis and the fake worker. Every request body refuses a field it
does not know with a 422 naming it; an operation that takes no body takes
``{}`` or nothing; a body FastAPI cannot decode is a 422 naming ``body``, not
its bare 400; responses may grow, so the SDK ignores fields it does not know.
"""

from __future__ import annotations

from typing import Any

import pytest

from sandgrid.client._call import parse_answer
from sandgrid.models import SessionInfo, SessionList
from tests.support.fakes import Grid

_METHODS = ("post", "put", "patch")
_RAW_BODIES = {
    ("put", "/v1/sessions/{session_id}/tar"),  # a tar archive
    ("put", "/proxy/{identity}/workspace/file"),  # AgentScope's raw file bytes
    ("post", "/proxy/{identity}/workspace/files:batch"),  # multipart
    # issue 21.1: the bytes of the sandbox's own server, relayed as they are
    *(
        (m, p)
        for m in ("post", "put", "patch", "delete")
        for p in ("/v1/sessions/{session_id}/ports/{port}/{path}", "/p/{token}/{path}")
    ),
}


def _session(grid: Grid) -> str:
    r = grid.http.post("/v1/sessions", json={"type": "python"}, headers=grid.headers())
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _schema(doc: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    for choice in schema.get("anyOf", [schema]):  # an optional body: Model | null
        if "$ref" in choice:
            found: dict[str, Any] = doc["components"]["schemas"][choice["$ref"].rsplit("/", 1)[1]]
            return found
    raise AssertionError(f"no model in {schema}")


def test_every_json_body_of_the_openapi_document_forbids_unknown_fields(grid: Grid) -> None:
    doc = grid.http.get("/openapi.json").json()
    for path, item in doc["paths"].items():
        for method in _METHODS:
            op = item.get(method)
            if op is None or (method, path) in _RAW_BODIES:
                continue
            assert "requestBody" in op, f"{method} {path} reads no body: add NO_BODY"
            schema = _schema(doc, op)
            assert schema.get("additionalProperties") is False, (method, path, schema["title"])


def test_pause_with_an_unknown_field_is_422_naming_it(grid: Grid) -> None:
    sid = _session(grid)
    r = grid.http.post(f"/v1/sessions/{sid}/pause", json={"memroy": True}, headers=grid.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_input" and err["context"]["field"] == "memroy"
    assert "Extra inputs are not permitted" in err["context"]["rule"]
    for ok in ({}, None):  # none, or {}: an ordinary pause
        r = grid.http.post(f"/v1/sessions/{sid}/pause", json=ok, headers=grid.headers())
        assert r.status_code == 200, (ok, r.text)


def test_pause_with_memory_on_a_runc_type_is_422_naming_the_runtime(grid: Grid) -> None:
    sid = _session(grid)
    r = grid.http.post(f"/v1/sessions/{sid}/pause", json={"memory": True}, headers=grid.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["context"]["field"] == "memory" and err["context"]["runtime"] == "runc"
    assert "gVisor" in err["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/sessions", {"type": "python", "gpu": True}, "gpu"),
        ("/v1/sessions", {"quotas": {"cpus": 1, "gpus": 1}}, "quotas.gpus"),
        ("/v1/sessions/{sid}/exec", {"shell": "true", "sudo": True}, "sudo"),
        ("/v1/sessions/{sid}/files", {"files": [{"path": "a", "owner": "root"}]}, "files.0.owner"),
        ("/v1/sessions/{sid}/checkpoints", {"name": "c", "keep": 3}, "keep"),
        ("/v1/sessions/{sid}/code", {"code": "1", "kernel": "r"}, "kernel"),
        ("/v1/sessions/{sid}/processes/1/wait", {"timeout_s": 1, "forever": True}, "forever"),
        ("/v1/sessions/{sid}/turns/t-1/cancel", {"force": True}, "force"),
        ("/v1/batches/b-1/resume", {"from": 0}, "from"),
        ("/list_session_keys", {"all": True}, "all"),
        ("/release", {"identity": "s-x", "memory": True}, "memory"),
    ],
)
def test_unknown_fields_are_422_naming_them(grid: Grid, path: str, body: Any, field: str) -> None:
    url = path.format(sid=_session(grid))
    r = grid.http.post(url, json=body, headers=grid.headers())
    assert r.status_code == 422, r.text
    assert r.json()["error"]["context"]["field"] == field


def test_a_body_that_is_not_utf8_json_is_422_naming_the_body(grid: Grid) -> None:
    sid = _session(grid)
    headers = {**grid.headers(), "content-type": "application/json"}
    for path in (f"/v1/sessions/{sid}/exec", "/v1/sessions", "/call_tool"):
        for raw in (b"\xff\xfe\x00", b"{not json"):
            r = grid.http.post(path, content=raw, headers=headers)
            assert r.status_code == 422, (path, raw, r.text)
            assert r.json()["error"]["context"]["field"] == "body"


def test_starlette_refusals_answer_the_error_body(grid: Grid) -> None:
    r = grid.http.get("/v1/no-such-route", headers=grid.headers())
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = grid.http.put("/v1/sessions", headers=grid.headers())
    assert r.status_code == 405 and r.json()["error"]["code"] == "invalid_input"
    assert "POST" in r.headers["allow"]


def test_the_sdk_ignores_response_fields_it_does_not_know(grid: Grid) -> None:
    """A newer grid may answer more: the SDK's models read what they know, no more."""
    with grid.client() as c:
        s = c.create_session("python")
    raw = grid.http.get("/v1/sessions", headers=grid.headers()).json()
    raw["later"] = 1
    raw["sessions"][0]["later"] = {"x": 1}
    raw["sessions"][0]["quotas"]["gpus"] = 2
    got = parse_answer(SessionList, raw)
    assert [x.id for x in got.sessions] == [s.id]
    assert isinstance(got.sessions[0], SessionInfo)


def test_on_idle_memory_on_a_runc_type_is_422_naming_the_field(grid: Grid) -> None:
    body = {"type": "python", "on_idle": "memory"}
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 422, r.text
    assert r.json()["error"]["context"]["field"] == "on_idle"
    body = {"type": "python-gvisor", "on_idle": "memory"}
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 201 and r.json()["on_idle"] == "memory", r.text


@pytest.mark.parametrize(
    ("body", "rule"),
    [({"count": 33}, "at most 32"), ({"count": 0}, "greater than or equal"), ({"count": 101}, "")],
)
def test_a_fork_count_out_of_bounds_is_422_naming_count(
    grid: Grid, body: dict[str, Any], rule: str
) -> None:
    sid = _session(grid)
    r = grid.http.post(f"/v1/sessions/{sid}/fork", json=body, headers=grid.headers())
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["context"]["field"] == "count" and rule in err["message"], err
    listed = grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"]
    assert [s["id"] for s in listed] == [sid]  # nothing was made


def test_fork_with_memory_on_a_runc_type_is_422_and_another_tenants_is_404(grid: Grid) -> None:
    sid = _session(grid)
    body = {"count": 2, "memory": True}
    r = grid.http.post(f"/v1/sessions/{sid}/fork", json=body, headers=grid.headers())
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "memory", r.text
    r = grid.http.post(f"/v1/sessions/s-{'x' * 32}/fork", json=body, headers=grid.headers())
    assert r.status_code == 404, r.text
