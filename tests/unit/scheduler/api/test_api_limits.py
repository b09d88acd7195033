"""The bounds of a session's record over HTTP (issue 23.9): 422 naming the field and the limit.

A 2 MB label value was accepted, and every ``GET /v1/sessions`` then answered
2 MB. The edges of each limit are in ``tests/unit/sandgrid/test_session_limits.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sandgrid.models import (
    MAX_ENV_BYTES,
    MAX_ENV_ENTRIES,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_RECORD_BYTES,
)
from tests.support.fakes import Grid


@pytest.mark.parametrize(
    ("body", "field", "limit"),
    [
        ({"labels": {"k": "x" * (2 << 20)}}, "labels", MAX_LABEL_VALUE),
        ({"labels": {f"k{i}": "" for i in range(MAX_LABELS + 1)}}, "labels", MAX_LABELS),
        ({"labels": {"k" * 64: ""}}, "labels", 63),
        ({"env": {f"V{i}": "" for i in range(MAX_ENV_ENTRIES + 1)}}, "env", MAX_ENV_ENTRIES),
        ({"env": {"V": "x" * MAX_ENV_BYTES}}, "env", MAX_ENV_BYTES),
    ],
)
def test_a_session_past_a_limit_is_422_naming_the_field_and_the_limit(
    grid: Grid, body: dict[str, Any], field: str, limit: int
) -> None:
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert err["code"] == "invalid_input" and err["context"]["field"] == field
    assert str(limit) in err["message"]
    assert grid.http.get("/v1/sessions", headers=grid.headers()).json()["sessions"] == []


def test_a_record_past_its_limit_is_422_naming_the_limit(grid: Grid) -> None:
    labels = {f"k{i}": "x" * MAX_LABEL_VALUE for i in range(MAX_LABELS)}
    env = {f"V{i}": "x" * 250 for i in range(MAX_ENV_ENTRIES - 1)}
    deny = [f"{'h' * 60}.example{i}.com" for i in range(200)]
    body = {"labels": labels, "env": env, "network": {"allow": ["*"], "deny": deny}}
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 422, r.text[:300]
    assert str(MAX_RECORD_BYTES) in r.json()["error"]["message"]


def test_an_exec_env_past_its_size_is_422(grid: Grid) -> None:
    sid = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
    body = {"shell": "true", "env": {"V": "x" * MAX_ENV_BYTES}}
    r = grid.http.post(f"/v1/sessions/{sid}/exec", json=body, headers=grid.headers())
    assert r.status_code == 422 and r.json()["error"]["context"]["field"] == "env"


def test_a_batch_takes_the_same_label_and_env_rules(grid: Grid) -> None:
    """A batch's labels go to each of its sessions: refused at submission, not mid-batch."""
    job = {"id": "j1", "shell": "true"}
    for body, field in (
        ({"jobs": [job], "labels": {"k": "x" * (MAX_LABEL_VALUE + 1)}}, "labels"),
        ({"jobs": [job], "labels": {"a b": "x"}}, "labels"),
        ({"jobs": [{**job, "env": {"V": "x" * MAX_ENV_BYTES}}]}, "jobs.0.env"),
    ):
        r = grid.http.post("/v1/batches", json=body, headers=grid.headers())
        assert r.status_code == 422, r.text[:300]
        assert r.json()["error"]["context"]["field"] == field
