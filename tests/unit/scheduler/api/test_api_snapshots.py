"""Session workspaces at the API: fork, close, and what a worker loss may re-run.

In-process app, real Redis, the fake worker (``fakes.FakeWorker``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sandgrid.errors import Conflict, NotFound
from sandgrid.wire import names
from tests.support.fakes import Grid


def _session(grid: Grid, token: str | None = None, **body: Any) -> dict[str, Any]:
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers(token))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _write(grid: Grid, sid: str, path: str, content: str) -> None:
    body = {"files": [{"path": path, "content": content}]}
    r = grid.http.post(f"/v1/sessions/{sid}/files", json=body, headers=grid.headers())
    assert r.status_code == 200, r.text


def test_fork_copies_the_latest_snapshot_through_a_worker(grid: Grid) -> None:
    src = _session(grid)
    _write(grid, src["id"], "a.txt", "from the source")
    fork = _session(grid, fork_from=src["id"])
    assert fork["forked_from"] == src["id"] and fork["snapshot"] == f"fork-of-{src['id']}"
    job, queue = grid.worker.sent[-1]
    assert job.op.kind == "fork" and job.session.id == fork["id"]
    assert queue == names.type_queue("python")  # any worker: no sandbox is needed
    with grid.client() as c:
        assert c.read_file(fork["id"], "a.txt") == "from the source"
        s = c.session(fork_from=src["id"], files={"b.txt": "seeded"})  # SDK, with files
        assert s.info.forked_from == src["id"]
        assert s.read_file("a.txt") == "from the source" and s.read_file("b.txt") == "seeded"


def test_fork_of_another_tenants_session_is_404_and_creates_nothing(grid: Grid) -> None:
    src = _session(grid)
    _write(grid, src["id"], "secret.txt", "acme's")
    sent = len(grid.worker.sent)
    r = grid.http.post(
        "/v1/sessions", json={"fork_from": src["id"]}, headers=grid.headers(grid.token_b)
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert len(grid.worker.sent) == sent
    assert grid.services.registry.count("globex") == 0
    with grid.client(grid.token_b) as c, pytest.raises(NotFound):
        c.session(fork_from=src["id"])


def test_fork_refusals_name_the_field(grid: Grid) -> None:
    fresh = _session(grid)
    r = grid.http.post("/v1/sessions", json={"fork_from": fresh["id"]}, headers=grid.headers())
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["context"]["field"] == "fork_from" and "no snapshot" in err["message"]
    bad = grid.http.post("/v1/sessions", json={"fork_from": "../x"}, headers=grid.headers())
    assert bad.status_code == 422
    closed = _session(grid)
    _write(grid, closed["id"], "a", "1")
    grid.http.delete(f"/v1/sessions/{closed['id']}", headers=grid.headers())
    r = grid.http.post("/v1/sessions", json={"fork_from": closed["id"]}, headers=grid.headers())
    assert r.status_code == 409 and r.json()["error"]["code"] == "session_closed"
    assert r.json()["error"]["context"]["field"] == "fork_from"


def test_close_of_a_released_session_still_reaches_a_worker(grid: Grid) -> None:
    """Its snapshots must be deleted even though no node holds it any more."""
    s = _session(grid)
    _write(grid, s["id"], "a", "1")
    grid.services.registry.ledger.release_lease(s["id"], grid.worker.node)
    r = grid.http.delete(f"/v1/sessions/{s['id']}", headers=grid.headers())
    assert r.status_code == 200
    job, queue = grid.worker.sent[-1]
    assert job.op.kind == "close" and queue == names.type_queue("python")


def test_close_of_a_session_that_never_ran_sends_nothing(grid: Grid) -> None:
    s = _session(grid)
    assert grid.http.delete(f"/v1/sessions/{s['id']}", headers=grid.headers()).status_code == 200
    assert grid.worker.sent == []


def test_a_turn_is_not_run_again_when_the_workspace_had_unsaved_changes(grid: Grid) -> None:
    s = _session(grid, snapshot_policy="on_idle")
    _write(grid, s["id"], "a", "1")
    grid.services.registry.update(s["id"], unsaved=True)  # what the worker records
    grid.worker.node = "doomed"
    grid.services.registry.ledger.heartbeat("doomed", 0.3)
    grid.worker.silent = True
    sent = len(grid.worker.sent)
    t0 = time.monotonic()
    r = grid.http.post(f"/v1/sessions/{s['id']}/exec", json={"shell": "x"}, headers=grid.headers())
    assert r.status_code == 503 and time.monotonic() - t0 < 3
    err = r.json()["error"]
    assert err["code"] == "worker_lost" and "no snapshot holds" in err["message"]
    assert len(grid.worker.sent) == sent + 1  # sent once, never re-dispatched


def test_a_turn_is_not_run_again_once_a_snapshot_was_taken_while_it_ran(grid: Grid) -> None:
    """Overlapping turns (issue 20): another turn of the session ended and saved while
    this one ran, so the snapshot may hold part of it; it is not run again from it."""
    s = _session(grid)
    _write(grid, s["id"], "a", "1")
    grid.worker.node = "doomed"
    grid.services.registry.ledger.heartbeat("doomed", 0.3)
    grid.worker.silent = True
    sent = len(grid.worker.sent)

    def another_turn_saved() -> None:  # what the worker records when another turn ends
        time.sleep(0.1)
        grid.services.registry.update(s["id"], snapshot="snap-of-another-turn")

    threading.Thread(target=another_turn_saved).start()
    r = grid.http.post(f"/v1/sessions/{s['id']}/exec", json={"shell": "x"}, headers=grid.headers())
    assert r.status_code == 503
    err = r.json()["error"]
    assert err["code"] == "worker_lost" and "a snapshot was taken while it ran" in err["message"]
    assert err["context"]["ran"] is None  # not known: part of it may be in the snapshot
    assert len(grid.worker.sent) == sent + 1  # sent once, never re-dispatched


def test_the_sdk_fork_error_is_the_servers(grid: Grid) -> None:
    s = _session(grid)
    _write(grid, s["id"], "a", "1")
    with grid.client() as c:
        c.close_session(s["id"])
        with pytest.raises(Conflict) as err:
            c.create_session(fork_from=s["id"])
    assert err.value.code == "session_closed"
