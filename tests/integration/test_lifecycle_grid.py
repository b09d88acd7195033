"""The session lifecycle on a real grid (API, two workers, Redis, Docker), and the
OpenAPI document checked by schemathesis against it."""

from __future__ import annotations

import time

import pytest
import schemathesis

from sandgrid.client import Client
from sandgrid.errors import LimitExceeded, NotFound
from sandgrid.lifecycle import MAX_CHECKPOINTS
from sandgrid.models import SessionCreate
from tests.support.conformance import conformance_failures
from tests.support.grid_fixtures import TOKEN, BatchGrid, batch_grid

__all__ = ["batch_grid"]  # the fixture, imported for this module

pytestmark = pytest.mark.integration


def _client(grid: BatchGrid) -> Client:
    return Client(grid.api_url, TOKEN, timeout=120)


def _cat(c: Client, sid: str) -> str:
    return c.exec(sid, shell="cat f 2>/dev/null || echo none").stdout.strip()


def test_checkpoint_restore_and_fork_from_a_checkpoint(batch_grid: BatchGrid) -> None:
    with _client(batch_grid) as c:
        s = c.create_session("python", snapshot_policy="on_idle")
        c.exec(s.id, shell="echo one > f")  # unsaved (on_idle): the checkpoint saves it
        assert c.checkpoint(s.id, "one").name == "one"
        c.exec(s.id, shell="echo two > f")
        assert _cat(c, s.id) == "two"
        c.restore(s.id, "one")
        assert _cat(c, s.id) == "one"
        fork = c.create_session_from(SessionCreate(fork_from=s.id, checkpoint="one"))
        assert _cat(c, fork.id) == "one"
        assert [k.name for k in c.checkpoints(s.id)] == ["one"]
        c.delete_checkpoint(s.id, "one")
        with pytest.raises(NotFound):
            c.restore(s.id, "one")
        for i in range(MAX_CHECKPOINTS):
            c.checkpoint(s.id, f"c{i}")
        with pytest.raises(LimitExceeded):
            c.checkpoint(s.id, "too-many")
        c.close_session(fork.id)
        c.close_session(s.id)


def test_pause_releases_the_sandbox_and_the_next_turn_resumes(batch_grid: BatchGrid) -> None:
    with _client(batch_grid) as c:
        s = c.create_session("python", snapshot_policy="never")
        c.exec(s.id, shell="echo kept > f")
        assert c.get_session(s.id).owner is not None
        paused = c.pause(s.id)
        assert paused.released and paused.snapshot
        assert c.get_session(s.id).owner is None  # no container held
        assert _cat(c, s.id) == "kept"
        c.close_session(s.id)


def test_an_idle_session_is_expired_by_the_sweeper(batch_grid: BatchGrid) -> None:
    with _client(batch_grid) as c:
        s = c.create_session_from(SessionCreate(idle_timeout_s=1, labels={"ttl": "yes"}))
        assert [x.id for x in c.find_sessions(labels={"ttl": "yes"})] == [s.id]
        deadline = time.monotonic() + 30
        while s.id in {x.id for x in c.list_sessions()} and time.monotonic() < deadline:
            time.sleep(0.5)
        assert c.find_sessions(labels={"ttl": "yes"}) == []
        assert c.get_session(s.id).state == "expired"


def test_the_cli_checkpoints_and_pauses(batch_grid: BatchGrid) -> None:
    with _client(batch_grid) as c:
        s = c.create_session("python", files={"f": "x"})
        for args in (("checkpoint", s.id, "cli"), ("checkpoints", s.id), ("pause", s.id)):
            proc = batch_grid.cli("sessions", *args)
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err.decode()
            assert s.id in out.decode() or "cli" in out.decode()
        c.close_session(s.id)


def test_schemathesis_finds_nothing_against_the_real_grid(batch_grid: BatchGrid) -> None:
    """Status codes and bodies conform to /openapi.json (bounded examples per operation)."""
    schema = schemathesis.openapi.from_url(f"{batch_grid.api_url}/openapi.json")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    failures = conformance_failures(schema, headers, max_examples=10, base_url=batch_grid.api_url)
    assert failures == []
