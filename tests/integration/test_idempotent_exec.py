"""Idempotent exec on the whole grid: one key, one run, whatever the retries.

Uses the grid of ``test_grid`` (``sandgrid serve`` and two real worker nodes).
"""

from __future__ import annotations

import threading
import uuid

import httpx
import pytest

from sandgrid.client import Client
from tests.integration.test_grid import API, TOKENS, acme, grid

pytestmark = pytest.mark.integration
__all__ = ["acme", "grid"]  # the fixtures, shared with test_grid

HEADERS = {"Authorization": f"Bearer {TOKENS['acme']}"}
APPEND = {"shell": "echo ran >> log; date +%s%N; sleep 1"}


def _exec(sid: str, key: str, body: dict[str, str]) -> httpx.Response:
    headers = {**HEADERS, "Idempotency-Key": key}
    return httpx.post(f"{API}/v1/sessions/{sid}/exec", json=body, headers=headers, timeout=60)


def test_concurrent_and_later_retries_with_one_key_run_once(acme: Client) -> None:
    with acme.session() as s:
        key = uuid.uuid4().hex
        answers: list[httpx.Response] = []
        barrier = threading.Barrier(3)

        def turn() -> None:
            barrier.wait()
            answers.append(_exec(s.id, key, APPEND))

        threads = [threading.Thread(target=turn) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [a.status_code for a in answers] == [200] * 3, [a.text for a in answers]
        assert len({a.json()["stdout"] for a in answers}) == 1  # one run's output
        later = _exec(s.id, key, APPEND)  # after it finished: the stored result
        assert later.status_code == 200 and later.json()["stdout"] == answers[0].json()["stdout"]
        assert s.read_file("log") == "ran\n"  # the command ran once
        other = _exec(s.id, key, {"shell": "echo other >> log"})
        assert other.status_code == 422
        assert other.json()["error"]["context"]["field"] == "Idempotency-Key"
        assert s.read_file("log") == "ran\n"
