"""Streams hold a slot on the in-process API (fake worker, real test Redis): 429 at the cap,
released when the stream ends."""

from __future__ import annotations

import time

import redis

from sandgrid.wire import names
from tests.support.fakes import Grid

SSE = {"Accept": "text/event-stream"}


def _session(grid: Grid) -> str:
    sid: str = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
    return sid


def test_a_streamed_exec_ends_with_its_result_and_gives_its_slot_back(
    grid: Grid, redis_client: redis.Redis[str]
) -> None:
    sid = _session(grid)
    headers = {**grid.headers(), **SSE}
    with grid.http.stream(
        "POST", f"/v1/sessions/{sid}/exec", json={"shell": "echo hi"}, headers=headers
    ) as r:
        assert r.status_code == 200
        text = "".join(r.iter_text())
    assert "event: turn" in text and "event: result" in text
    key = names.stream_slots_key("stream", "session", sid)
    end = time.monotonic() + 5
    while redis_client.zcard(key) and time.monotonic() < end:
        time.sleep(0.05)
    assert redis_client.zcard(key) == 0


def test_the_session_cap_answers_429_naming_it(grid: Grid, redis_client: redis.Redis[str]) -> None:
    sid = _session(grid)
    cap = grid.services.settings.streams.per_session
    key = names.stream_slots_key("stream", "session", sid)
    redis_client.zadd(key, {f"held-{i}": time.time() + 60 for i in range(cap)})
    r = grid.http.post(
        f"/v1/sessions/{sid}/exec", json={"shell": "echo hi"}, headers={**grid.headers(), **SSE}
    )
    assert r.status_code == 429 and r.headers["Retry-After"]
    assert r.json()["error"]["context"]["limit"] == "streams_per_session"
    # another session of the same tenant still streams
    other = _session(grid)
    r = grid.http.post(
        f"/v1/sessions/{other}/exec", json={"shell": "echo hi"}, headers={**grid.headers(), **SSE}
    )
    assert r.status_code == 200 and "event: result" in r.text
