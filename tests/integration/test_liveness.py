"""Worker death on the real grid: kill -9 of the worker running a turn, with and
without a restart under the same name; the turn is answered within the heartbeat
timeout + 5 s (default settings: 3 s x 3 beats + 5 s = 15 s), and its command ran
once on the workspace the session keeps.

Each test starts its own grid (``LocalGrid``) on its own port, with the default
heartbeat (the promise is about it), and stops every process it started.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sandgrid.client import Client
from sandgrid.errors import SandgridError
from sandgrid.localgrid import LocalGrid
from sandgrid.wire.settings import DEFAULT_HEARTBEAT_S

pytestmark = pytest.mark.integration

PORT = int(os.environ.get("SANDGRID_TEST_LIVENESS_PORT", "8713"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-live-" + "l" * 24
#: heartbeat timeout (3 beats) + 5 s
PROMISE_S = 3 * DEFAULT_HEARTBEAT_S + 5
#: the turn that is running when its worker is killed
SLOW_TURN = "echo run >> runs.log; sleep 4; echo finished"


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[LocalGrid]:
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    r.flushdb()
    env = {
        "SANDGRID_WORKER__POOL_SIZE": "1",
        "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
    }
    g = LocalGrid(tmp_path, port=PORT, redis_url=REDIS_URL, tenants={"live": TOKEN}, env=env)
    try:
        g.start(["live-w1", "live-w2"], concurrency=2)
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


def _run_while(grid: LocalGrid, session: Any, action: Any) -> tuple[Any, float]:
    """Run the slow turn; ``action`` once it has started; (result, s after action)."""
    done: dict[str, Any] = {}

    def turn() -> None:
        try:
            done["result"] = session.exec(shell=SLOW_TURN, timeout_s=30)
        except Exception as exc:  # reported by the assertion below
            done["result"] = exc
        done["at"] = time.monotonic()

    t = threading.Thread(target=turn)
    t.start()
    time.sleep(1.5)  # the command has started
    acted = time.monotonic()
    action()
    t.join(60)
    assert "result" in done, "the turn was never answered"
    return done["result"], done["at"] - acted


def test_kill_of_the_owner_mid_turn_is_answered_fast_and_runs_once(grid: LocalGrid) -> None:
    with Client(grid.api_url, TOKEN) as c, c.session(type="python") as s:
        first = s.exec(shell="echo ready > state")
        assert first.exit_code == 0, first
        owner = str(first.node)
        result, waited = _run_while(grid, s, lambda: grid.kill(owner))
        assert not isinstance(result, Exception), result
        assert result.exit_code == 0 and result.stdout == "finished\n", result
        assert result.node != owner and waited <= PROMISE_S, (waited, grid.logs())
        assert s.read_file("runs.log") == "run\n"  # one run on the kept workspace
        assert s.read_file("state") == "ready\n"


def test_kill_and_restart_under_the_same_name_is_a_new_incarnation(grid: LocalGrid) -> None:
    with Client(grid.api_url, TOKEN) as c, c.session(type="python") as s:
        first = s.exec(shell="echo ready > state")
        owner = str(first.node)

        def kill_and_restart() -> None:
            grid.kill(owner)
            grid.start_worker(owner, concurrency=2)  # beats again long before 9 s

        result, waited = _run_while(grid, s, kill_and_restart)
        assert not isinstance(result, Exception), (result, grid.logs())
        assert result.exit_code == 0 and result.stdout == "finished\n", result
        assert waited <= PROMISE_S, (waited, grid.logs())
        assert s.read_file("runs.log") == "run\n"
        again = s.exec(shell="cat runs.log")
        assert again.exit_code == 0 and again.stdout == "run\n"


def test_types_and_no_capacity_on_the_real_grid(grid: LocalGrid) -> None:
    """The API refuses at once a type no live node serves (the SDK's own retries of
    that refusal, with its ``retry_after``, are off here: test_client_retry.py)."""
    with Client(grid.api_url, TOKEN, retries=0) as c:
        types = {t.name: t for t in c.types()}
        assert types["python"].nodes == ["live-w1", "live-w2"]
        assert types["appworld"].nodes == []
        t0 = time.monotonic()
        with pytest.raises(SandgridError) as err:
            c.create_session(type="appworld")
        assert err.value.code == "no_capacity" and time.monotonic() - t0 < 1
