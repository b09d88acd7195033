"""Turns of one session at once, through a real grid (API, Celery, a worker, runc and runsc).

A session runs up to ``quotas.max_parallel_turns`` turns at once, as commands
in one container do; a call beyond waits in order for a slot, then 429
``session_busy`` (never 409). Each check is one an agent framework relies on:
tool calls in parallel, one of them long; a deadline or a cancel of one
command that leaves the others running; a session that is not live, brought
back once for all the calls that arrive together.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sandgrid.client import Client
from sandgrid.localgrid import LocalGrid
from sandgrid.models import ExecResult
from tests.support.grid_fixtures import own_grid

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
PORT = 8746
TOKEN = "tok-parallel-" + "p" * 24
TYPES = ("python", "python-gvisor")
SLOT_WAIT_S = 3.0


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    env = {"SANDGRID_SLOT_WAIT_S": str(SLOT_WAIT_S), "SANDGRID_HEARTBEAT_S": "0.5"}
    with own_grid(
        Path(tmp_path_factory.mktemp("parallel")),
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"par": TOKEN},
        nodes=["par-w1"],
        types=",".join(TYPES),
        env=env,
    ) as g:
        yield g


@pytest.fixture(params=TYPES)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(grid: LocalGrid) -> Iterator[Client]:
    with Client(grid.api_url, TOKEN) as c:
        yield c


def _together(*calls: object) -> list[object]:
    with cf.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]  # type: ignore[arg-type]
        return [f.result(timeout=120) for f in futures]


def test_two_commands_of_one_session_run_at_once(client: Client, kind: str) -> None:
    """The first waits for a file only the second writes: run one after the other, the
    first would time out."""
    wait = "for i in $(seq 200); do [ -f ready ] && echo seen && exit 0; sleep 0.05; done; exit 9"
    with client.session(type=kind) as s:
        first, second = _together(
            lambda: s.exec(shell=wait, timeout_s=20),
            lambda: (time.sleep(0.3), s.exec(shell="touch ready && echo made"))[1],
        )
    assert isinstance(first, ExecResult) and first.exit_code == 0 and first.stdout == "seen\n"
    assert isinstance(second, ExecResult) and second.stdout == "made\n"


def test_mixed_calls_in_parallel_all_answer(client: Client, kind: str) -> None:
    """Four tool calls of one model turn: none is refused, each sees its own answer."""
    with client.session(type=kind) as s:
        results = _together(
            lambda: s.exec(shell="sleep 1; echo slow"),
            lambda: s.write_files({"a.txt": "A"}),
            lambda: s.exec(python="print(6 * 7)"),
            lambda: s.exec(shell="echo fast"),
        )
        assert s.read_file("a.txt") in ("A", b"A")
    outs = [r.stdout for r in results if isinstance(r, ExecResult)]
    assert sorted(outs) == ["42\n", "fast\n", "slow\n"]


def test_a_deadline_kills_its_command_and_spares_the_other(client: Client, kind: str) -> None:
    with client.session(type=kind) as s:
        slow, timed = _together(
            lambda: s.exec(shell="sleep 3; echo survived", timeout_s=20),
            lambda: s.exec(shell="sleep 60", timeout_s=1),
        )
    assert isinstance(timed, ExecResult) and timed.timed_out
    assert isinstance(slow, ExecResult) and slow.exit_code == 0 and slow.stdout == "survived\n"


def test_a_call_beyond_the_slots_waits_in_order_then_429(grid: LocalGrid, client: Client) -> None:
    with client.session(type="python", quotas={"max_parallel_turns": 2}) as s:
        t0 = time.monotonic()
        results = _together(*[lambda: s.exec(shell="sleep 1; echo ok") for _ in range(3)])
        assert all(isinstance(r, ExecResult) and r.stdout == "ok\n" for r in results)
        assert time.monotonic() - t0 >= 2  # the third waited for a slot
        url = f"{grid.api_url}/v1/sessions/{s.id}/exec"
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def raw(cmd: str) -> httpx.Response:
            return httpx.post(url, json={"shell": cmd}, headers=headers, timeout=60)

        answers = _together(
            lambda: raw("sleep 8"),
            lambda: raw("sleep 8"),
            lambda: (time.sleep(0.5), raw("echo late"))[1],
        )
    codes = sorted(a.status_code for a in answers if isinstance(a, httpx.Response))
    assert codes == [200, 200, 429]
    late = answers[2]
    assert isinstance(late, httpx.Response)
    body = late.json()["error"]
    assert body["code"] == "session_busy" and body["context"]["max"] == 2
    assert float(late.headers["Retry-After"]) > 0


def test_a_session_not_live_is_restored_once_for_calls_that_come_together(
    client: Client, kind: str
) -> None:
    with client.session(type=kind) as s:
        s.write_files({"kept.txt": "kept"})
        s.pause()
        results = _together(*[lambda: s.exec(shell="cat kept.txt; hostname") for _ in range(4)])
    outs = {r.stdout for r in results if isinstance(r, ExecResult)}
    assert len(outs) == 1 and next(iter(outs)).startswith("kept")  # one sandbox served them all


def test_cancel_stops_only_its_own_command(client: Client) -> None:
    with client.session(type="python") as s:
        stream = s.exec_stream(shell="echo started; sleep 60")
        other = cf.ThreadPoolExecutor(1).submit(s.exec, shell="sleep 2; echo other")
        for event in stream:
            if event.type == "stdout":
                break
        stream.cancel()
        cancelled = stream.wait()
        done = other.result(timeout=30)
    assert cancelled.cancelled
    assert done.exit_code == 0 and done.stdout == "other\n"
