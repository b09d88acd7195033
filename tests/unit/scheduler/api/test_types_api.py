"""``/v1/types`` in-process (25.1, 25.5): who sees what, who may change it, the rules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import Conflict, ErrorCode, NotFound
from sandgrid.models import SessionCreate
from tests.support.fakes import Grid

ADMIN = "tok-admin-" + "z" * 24
IMAGE = "sandgrid/sandbox-python:latest"
DIGEST = "sha256:" + "d" * 64


@pytest.fixture
def admin(grid: Grid, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN)
    monkeypatch.setattr(
        grid.services,
        "settings",
        grid.services.settings.model_copy(update={"admin_token_file": token_file}),
    )
    assert grid.services.types is not None
    grid.services.types.resolve = lambda image: DIGEST if image == IMAGE else ""
    yield ADMIN


def _add(grid: Grid, token: str, **body: Any) -> Any:
    fields = {"image": IMAGE, "runtime": "runc", **body}
    return grid.http.post("/v1/types", json=fields, headers=grid.headers(token))


def test_tenants_list_the_shipped_types_with_their_definition(grid: Grid) -> None:
    r = grid.http.get("/v1/types", headers=grid.headers())
    found = {t["name"]: t for t in r.json()["types"]}
    assert {"python", "python-gvisor", "bfcl", "appworld"} <= set(found)
    assert found["python-gvisor"]["runtime"] == "runsc" and found["python"]["image"] == IMAGE


def test_only_the_admin_token_adds_or_removes(grid: Grid, admin: str) -> None:
    assert _add(grid, grid.token_a, name="python-x").status_code == 401
    assert grid.http.delete("/v1/types/python", headers=grid.headers()).status_code == 401
    made = _add(grid, admin, name="python-x", quotas={"memory_mb": 256}, pool_size=1)
    assert made.status_code == 201, made.text
    assert made.json()["digest"] == DIGEST and made.json()["source"] == "api"
    assert grid.http.get("/v1/types/python-x", headers=grid.headers()).status_code == 200


def test_no_admin_token_configured_refuses_every_change(grid: Grid) -> None:
    r = _add(grid, ADMIN, name="python-x")
    assert r.status_code == 401 and "SANDGRID_ADMIN_TOKEN_FILE" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "python"}, "name"),  # taken
        ({"name": "python-y", "image": "sandgrid/none:1"}, "image"),  # no such image
        ({"name": "python-y", "runtime": "kata"}, "runtime"),
        ({"name": "python-y", "ceilings": {"cpu": 2}}, "ceilings"),
        ({"name": "Python"}, "name"),
    ],
)
def test_a_bad_type_is_422_naming_the_field(
    grid: Grid, admin: str, body: dict[str, Any], field: str
) -> None:
    r = _add(grid, admin, **body)
    assert r.status_code == 422, r.text
    assert field in r.json()["error"]["context"]["field"]


def test_a_private_type_is_404_for_another_tenant(grid: Grid, admin: str) -> None:
    assert _add(grid, admin, name="python-acme", tenant="acme").status_code == 201
    other = grid.headers(grid.token_b)
    assert grid.http.get("/v1/types/python-acme", headers=other).status_code == 404
    names_b = [t["name"] for t in grid.http.get("/v1/types", headers=other).json()["types"]]
    assert "python-acme" not in names_b
    r = grid.http.post("/v1/sessions", json={"type": "python-acme"}, headers=other)
    assert r.status_code == 404 and "python-acme" not in r.json()["error"]["message"].split(";")[1]
    mine = grid.http.post("/v1/sessions", json={"type": "python-acme"}, headers=grid.headers())
    assert mine.status_code == 201, mine.text
    everyone = grid.http.get("/v1/types", headers=grid.headers(admin)).json()["types"]
    assert "python-acme" in [t["name"] for t in everyone]


def test_a_types_quotas_and_ceilings_apply_to_its_sessions(grid: Grid, admin: str) -> None:
    body = {"quotas": {"memory_mb": 256}, "ceilings": {"memory_mb": 1024}}
    assert _add(grid, admin, name="python-small", **body).status_code == 201
    plain = grid.http.post("/v1/sessions", json={"type": "python-small"}, headers=grid.headers())
    assert plain.json()["quotas"]["memory_mb"] == 256
    asked = {"type": "python-small", "quotas": {"memory_mb": 768, "cpus": 2}}
    got = grid.http.post("/v1/sessions", json=asked, headers=grid.headers()).json()["quotas"]
    assert got["memory_mb"] == 768 and got["cpus"] == 2
    over = {"type": "python-small", "quotas": {"memory_mb": 2048}}
    r = grid.http.post("/v1/sessions", json=over, headers=grid.headers())
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "quotas.memory_mb"
    shipped = grid.http.post("/v1/sessions", json={"type": "python"}, headers=grid.headers())
    assert shipped.json()["quotas"]["memory_mb"] == 512  # the shipped types: as before


def test_a_tenants_own_ceiling_replaces_the_types(grid: Grid, admin: str) -> None:
    assert _add(grid, admin, name="python-capped", ceilings={"memory_mb": 512}).status_code == 201
    token = grid.add_tenant("bigco", type_ceilings={"python-capped": {"memory_mb": 2048}})
    body = {"type": "python-capped", "quotas": {"memory_mb": 1024}}
    assert grid.http.post("/v1/sessions", json=body, headers=grid.headers()).status_code == 422
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers(token))
    assert r.status_code == 201, r.text


def test_a_type_in_use_is_409_with_the_count_then_removed(grid: Grid, admin: str) -> None:
    assert _add(grid, admin, name="python-x").status_code == 201
    ids = [
        grid.http.post("/v1/sessions", json={"type": "python-x"}, headers=grid.headers(t)).json()[
            "id"
        ]
        for t in (grid.token_a, grid.token_b)
    ]
    with grid.client(admin) as client:
        with pytest.raises(Conflict) as busy:
            client.remove_type("python-x")
        assert busy.value.code == ErrorCode.TYPE_IN_USE and busy.value.context["sessions"] == 2
        for sid, token in zip(ids, (grid.token_a, grid.token_b), strict=True):
            grid.http.delete(f"/v1/sessions/{sid}", headers=grid.headers(token))
        assert client.remove_type("python-x").name == "python-x"
        with pytest.raises(NotFound):
            client.get_type("python-x")
    r = grid.http.post("/v1/sessions", json={"type": "python-x"}, headers=grid.headers())
    assert r.status_code == 404 and r.json()["error"]["context"]["field"] == "type"


def test_a_session_is_not_made_of_a_type_removed_after_its_admission(
    grid: Grid, admin: str
) -> None:
    """Another API process's view may still hold a removed type: the create
    script checks the catalog atomically with the insert and answers 404."""
    assert _add(grid, admin, name="python-x").status_code == 201
    types = grid.services.types
    assert types is not None
    types.store.delete("python-x")  # as another process would; this view not refreshed
    with pytest.raises(NotFound) as gone:
        grid.services.registry.create("acme", SessionCreate(type="python-x"))
    assert gone.value.context == {"field": "type", "rule": "a type in the catalog"}
    assert types.sessions_of("python-x") == 0


def test_a_session_created_while_its_type_is_removed_keeps_the_type(
    grid: Grid, admin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the removal closes: a session made between the count and the
    delete is counted after the delete, and the type is put back (409)."""
    assert _add(grid, admin, name="python-x").status_code == 201
    types = grid.services.types
    assert types is not None
    real_count = types.sessions_of
    counts: list[int] = []

    def racing_count(name: str) -> int:
        if not counts:  # the first count, then a create lands before the delete
            counts.append(real_count(name))
            grid.services.registry.create("acme", SessionCreate(type=name))
            return counts[0]
        counts.append(real_count(name))
        return counts[-1]

    monkeypatch.setattr(types, "sessions_of", racing_count)
    with grid.client(admin) as client:
        with pytest.raises(Conflict) as busy:
            client.remove_type("python-x")
        assert busy.value.context["sessions"] == 1 and counts == [0, 1]
        assert client.get_type("python-x").name == "python-x"
    r = grid.http.post("/v1/sessions", json={"type": "python-x"}, headers=grid.headers())
    assert r.status_code == 201, r.text


def test_the_sdk_adds_and_reads_a_type(grid: Grid, admin: str) -> None:
    with grid.client(admin) as client:
        added = client.add_type({"name": "python-sdk", "image": IMAGE, "runtime": "runsc"})
        assert added.digest == DIGEST and added.runtime == "runsc"
    with grid.client() as client:
        assert client.get_type("python-sdk").image == IMAGE
        assert "python-sdk" in [t.name for t in client.types()]


def test_nodes_name_a_private_type_to_the_operator_alone(grid: Grid, admin: str) -> None:
    """``GET /v1/nodes`` needs no token, so a tenant's template must not be named there."""
    assert _add(grid, admin, name="python-acme", tenant="acme").status_code == 201
    grid.services.registry.ledger.heartbeat("w-priv", 30, types=["python", "python-acme", "gone"])

    def node(token: str | None) -> Any:
        headers = grid.headers(token) if token else {}
        found = grid.http.get("/v1/nodes", headers=headers).json()["nodes"]
        return next(n for n in found if n["name"] == "w-priv")

    for caller in (None, grid.token_a):  # no token, or a tenant's (even acme's own)
        seen = node(caller)
        assert seen["types"] == ["python"] and seen["private_types"] == 2
    seen = node(admin)
    assert seen["types"] == ["python", "python-acme", "gone"] and seen["private_types"] == 0
