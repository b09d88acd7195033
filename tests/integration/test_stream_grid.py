"""Streamed output and cancel through a real grid: API (SSE) + Celery + two workers.

The worker appends an exec's chunks to the turn's Redis Stream; the API serves
them as Server-Sent Events; the SDK hands them to callbacks or iterates them;
cancel travels to the owning worker's direct queue and kills the exec's process
tree through the agent. Uses the module grid of ``tests.support.grid_fixtures``.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from sandgrid.client import AsyncClient, Client
from sandgrid.errors import InvalidInput, NotFound
from scheduler.turns.idempotency import turn_id_for
from tests.support.grid_fixtures import TOKEN, BatchGrid, batch_grid

__all__ = ["batch_grid"]  # the fixture, imported for this module

A_THEN_B = "print('a', flush=True); import time; time.sleep(1); print('b')"
TREE = "sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; echo started; sleep 1000"


@pytest.fixture
def client(batch_grid: BatchGrid) -> Client:
    return Client(batch_grid.api_url, TOKEN)


def test_callbacks_get_chunks_in_order_then_the_result(client: Client) -> None:
    got: list[tuple[str, str]] = []
    with client, client.session(type="python") as s:
        r = s.exec(
            python=A_THEN_B + "; import sys; print('e', file=sys.stderr)",
            on_stdout=lambda t: got.append(("out", t)),
            on_stderr=lambda t: got.append(("err", t)),
        )
    assert r.exit_code == 0 and r.stdout == "a\nb\n" and r.stderr == "e\n"
    assert "".join(t for k, t in got if k == "out") == "a\nb\n"
    assert "".join(t for k, t in got if k == "err") == "e\n"
    assert got[0] == ("out", "a\n")


def test_iterator_events_have_increasing_ids_and_end_with_the_result(client: Client) -> None:
    with client, client.session(type="python") as s, s.exec_stream(python=A_THEN_B) as stream:
        events = list(stream)
        result = stream.wait()
    assert events[0].type == "turn" and events[0].turn_id == stream.turn_id
    assert events[-1].type == "result" and result.stdout == "a\nb\n"
    ids = [tuple(int(x) for x in e.id.split("-")) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_reattach_after_an_offset_loses_and_repeats_nothing(client: Client) -> None:
    code = "import time\nfor i in range(12):\n    print(i, flush=True); time.sleep(0.05)"
    with client, client.session(type="python") as s:
        stream = s.exec_stream(python=code)
        first: list[str] = []
        for event in stream:
            if event.type == "stdout":
                first.append(event.data)
                if len(first) == 3:
                    break
        offset = stream.state.last_id
        stream.close()
        rest = s.events(stream.turn_id, after=offset)
        more = [e.data for e in rest if e.type == "stdout"]
        assert rest.wait().stdout == "".join(first + more)
        assert "".join(first + more) == "".join(f"{i}\n" for i in range(12))
        whole = [e.data for e in s.events(stream.turn_id) if e.type == "stdout"]
        assert "".join(whole) == "".join(first + more)


def test_reattach_refuses_a_bad_offset_and_another_sessions_turn(client: Client) -> None:
    with client, client.session(type="python") as s, client.session(type="python") as other:
        stream = s.exec_stream(shell="echo x")
        stream.wait()
        with pytest.raises(InvalidInput) as err:
            s.events(stream.turn_id, after="yesterday")
        assert err.value.context["field"] == "after"
        with pytest.raises(NotFound):
            other.events(stream.turn_id)


def _started(stream: object) -> None:
    for event in stream:  # type: ignore[attr-defined]
        if event.type == "stdout" and "started" in event.data:
            return
    raise AssertionError("the command never started")


def test_cancel_kills_the_whole_tree_and_the_session_stays_usable(client: Client) -> None:
    with client, client.session(type="python") as s:
        stream = s.exec_stream(shell=TREE, timeout_s=120)
        _started(stream)
        assert stream.cancel().state == "cancelling"
        r = stream.wait()
        assert r.cancelled and r.exit_code is None and not r.timed_out
        ps = s.exec(argv=["ps", "-eo", "args"]).stdout
        assert "sleep 1000" not in ps, ps
        assert s.exec(shell="echo ok").stdout == "ok\n"
        assert s.cancel(stream.turn_id).state == "finished"  # a no-op once it ended


def test_cancel_before_the_turn_starts_means_it_never_runs(client: Client) -> None:
    with client, client.session(type="python") as s:
        # a turn id chosen by the client (its idempotency key names it), cancelled first
        key = "cancel-first-0001"
        turn = turn_id_for("batch", s.id, key)
        assert s.cancel(turn).state == "cancelling"
        r = s.exec(shell="touch ran", idempotency_key=key)
        assert r.cancelled and r.exit_code is None
        assert "ran" not in [e.path for e in s.list_files()]


def test_closing_a_session_during_a_turn_cancels_it(client: Client) -> None:
    with client:
        s = client.session(type="python").__enter__()
        stream = s.exec_stream(shell=TREE, timeout_s=120)
        _started(stream)
        info = s.close()
        assert info.state == "closed"
        r = stream.wait()
        assert r.cancelled


def test_async_exec_stream_and_callbacks(batch_grid: BatchGrid) -> None:
    async def go() -> tuple[list[str], str, bool]:
        async with AsyncClient(batch_grid.api_url, TOKEN) as c:
            s = await c.session(type="python")
            try:
                got: list[str] = []
                r = await s.exec(python=A_THEN_B, on_stdout=got.append)
                stream = await s.exec_stream(shell=TREE, timeout_s=120)
                async for event in stream:
                    if event.type == "stdout":
                        break
                await stream.cancel()
                cancelled = (await stream.wait()).cancelled
                return got, r.stdout, cancelled
            finally:
                await s.close()

    got, stdout, cancelled = asyncio.run(go())
    assert got[0] == "a\n" and "".join(got) == stdout == "a\nb\n" and cancelled


def test_cli_exec_prints_as_it_goes_and_ctrl_c_cancels(batch_grid: BatchGrid) -> None:
    ok = batch_grid.cli("exec", "--", "python3", "-c", A_THEN_B)
    out, _ = ok.communicate(timeout=120)
    assert ok.returncode == 0 and out == b"a\nb\n"
    proc = batch_grid.cli("exec", "--shell", "--", TREE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"started\n"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert b"cancelled" in err and proc.returncode != 0


def test_many_chunks_arrive_whole(client: Client) -> None:
    code = "import sys\nfor i in range(3000):\n    sys.stdout.write(f'{i} '); sys.stdout.flush()"
    with client, client.session(type="python") as s:
        parts: list[str] = []
        r = s.exec(python=code, on_stdout=parts.append)
    assert "".join(parts) == r.stdout == "".join(f"{i} " for i in range(3000))
