"""Batches through the real API, SDK and Redis, with a fake worker: results exactly
once, retries of infrastructure failures only, lanes, cancel and resume."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from sandgrid.batch.models import BatchCreate, BatchInfo, BatchJob, BatchResult
from sandgrid.client import Client
from sandgrid.errors import CapacityError, InvalidInput, NotFound, SandgridError
from sandgrid.models import ExecRequest
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.settings import Settings
from scheduler.batch.capacity import StaticCapacity
from scheduler.batch.lanes import RESET_ARGV, RUN_THEN_RESET, then_reset
from scheduler.batch.run import RetryPolicy
from scheduler.batch.store import BatchStore
from tests.support.fakes import FakeWorker, Grid, make_grid


class FlakyWorker(FakeWorker):
    """``argv=["flaky", key, n]`` fails with ``no_capacity`` the first n times."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.failures: Counter[str] = Counter()

    def run(self, job: TurnJob) -> TurnOutcome:
        op = job.op
        if isinstance(op, ExecOp) and op.request.argv and op.request.argv[0] == "flaky":
            key, times = op.request.argv[1], int(op.request.argv[2])
            if self.failures[key] < times:
                self.failures[key] += 1
                err = CapacityError("no warm container", operation="exec")
                return TurnOutcome(
                    turn_id=job.turn_id, node=self.node, ok=False, error=err.to_body()["error"]
                )
        return super().run(job)


@pytest.fixture
def bgrid(redis_client: redis.Redis[str], test_settings: Settings) -> Iterator[Grid]:
    for grid in make_grid(redis_client, test_settings):
        flaky = FlakyWorker(grid.services.registry.ledger)
        grid.worker = flaky
        grid.services.runner.dispatcher = flaky
        manager = grid.services.batches
        assert manager is not None
        manager.turns.dispatcher = flaky  # batches have a turn runner of their own
        manager.capacity = StaticCapacity({flaky.node: 3})
        manager.policy = RetryPolicy(base_s=0.01, cap_s=0.02)
        yield grid


def _finish(client: Client, batch_id: str, timeout: float = 15.0) -> BatchInfo:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.get_batch(batch_id)
        if info.state in ("done", "cancelled"):
            return info
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} did not finish: {client.get_batch(batch_id)}")


def _all_results(client: Client, batch_id: str) -> list[BatchResult]:
    results, offset = client.batch_results(batch_id, 0, limit=7)
    while True:
        more, offset = client.batch_results(batch_id, offset, limit=7)
        if not more:
            return results
        results += more


def test_every_job_gets_exactly_one_result(bgrid: Grid) -> None:
    jobs = [{"id": f"j{i}", "argv": ["echo", str(i)]} for i in range(25)]
    jobs.append({"id": "bad", "argv": ["false"]})
    with bgrid.client() as c:
        info = c.create_batch(jobs, concurrency=4)
        assert info.total == 26 and info.state in ("running", "done")
        done = _finish(c, info.id)
        results = _all_results(c, info.id)
    assert (done.state, done.ok, done.failed, done.errors) == ("done", 25, 1, 0)
    assert sorted(r.id for r in results) == sorted(j["id"] for j in jobs)
    by_id = {r.id: r for r in results}
    assert by_id["j3"].stdout == "echo 3\n" and by_id["j3"].status == "ok"
    assert by_id["bad"].status == "failed" and by_id["bad"].exit_code == 3
    assert by_id["bad"].attempts == 1  # the job's own failure is not retried


def test_job_isolation_uses_a_fresh_closed_session_on_the_batch_queue(bgrid: Grid) -> None:
    with bgrid.client() as c:
        info = c.create_batch([{"id": f"j{i}", "shell": "ls"} for i in range(5)])
        _finish(c, info.id)
        assert c.list_sessions() == []  # every job's session is closed
    execs = [(j, q) for j, q in bgrid.worker.sent if isinstance(j.op, ExecOp)]
    assert len(execs) == 5
    assert {q for _, q in execs} == {"sbx.python.batch"}
    assert all(j.batch and j.close_after for j, _ in execs)
    assert len({j.session.id for j, _ in execs}) == 5
    assert all(j.session.snapshot_policy == "never" for j, _ in execs)


def test_lane_isolation_reuses_a_sandbox_and_resets_it_after_each_job(bgrid: Grid) -> None:
    big = "x = 1\n" * 20_000  # too large to wrap: a reset turn of its own
    with bgrid.client() as c:
        jobs: list[dict[str, object]] = [
            {"id": f"j{i}", "argv": ["echo", str(i)]} for i in range(4)
        ]
        jobs += [{"id": "sh", "shell": "ls"}, {"id": "big", "python": big}]
        info = c.create_batch(jobs, isolation="lane", concurrency=1)
        done = _finish(c, info.id)
        assert done.ok == 6
        by_id = {r.id: r for r in _all_results(c, info.id)}
        assert c.list_sessions() == []  # the lane is closed at the end
    execs = [j for j, _ in bgrid.worker.sent if isinstance(j.op, ExecOp)]
    assert len({j.session.id for j in execs}) == 1
    argvs = [j.op.request.argv for j in execs if isinstance(j.op, ExecOp)]
    wrap = ["/bin/sh", "-c", RUN_THEN_RESET, "sandgrid-lane"]
    assert argvs[:5] == [
        *[[*wrap, "echo", str(i)] for i in range(4)],
        [*wrap, "/bin/sh", "-c", "ls"],
    ]
    assert argvs[5] is None and argvs[6] == RESET_ARGV  # the big python job, then a reset
    assert by_id["j2"].stdout.endswith("echo 2\n")
    assert not any(j.close_after for j in execs)


def test_then_reset_keeps_the_job_and_its_request() -> None:
    req = ExecRequest(python="print(1)", stdin="in", timeout_s=3, env={"A": "b"}, cwd="sub")
    wrapped = then_reset(req)
    assert wrapped is not None and wrapped.python is None and wrapped.shell is None
    assert wrapped.argv == [
        "/bin/sh",
        "-c",
        RUN_THEN_RESET,
        "sandgrid-lane",
        "python3",
        "-c",
        "print(1)",
    ]
    assert (wrapped.stdin, wrapped.timeout_s, wrapped.env, wrapped.cwd) == (
        "in",
        3,
        {"A": "b"},
        "sub",
    )
    assert then_reset(ExecRequest(python="#" * 200_000)) is None


def test_files_are_written_before_the_job_runs(bgrid: Grid) -> None:
    job = {"id": "f", "argv": ["cat", "in.txt"], "files": [{"path": "in.txt", "content": "hi"}]}
    with bgrid.client() as c:
        info = c.create_batch([job])
        _finish(c, info.id)
    kinds = [j.op.kind for j, _ in bgrid.worker.sent]
    assert kinds[:2] == ["write", "exec"]


def test_infrastructure_failures_are_retried_and_counted(bgrid: Grid) -> None:
    jobs = [
        {"id": "once", "argv": ["flaky", "once", "1"]},
        {"id": "never-ok", "argv": ["flaky", "never", "99"]},
        {"id": "fine", "argv": ["true"]},
    ]
    with bgrid.client() as c:
        info = c.create_batch(jobs, max_attempts=3)
        done = _finish(c, info.id)
        by_id = {r.id: r for r in _all_results(c, info.id)}
    assert (by_id["once"].status, by_id["once"].attempts) == ("ok", 2)
    assert (by_id["never-ok"].status, by_id["never-ok"].attempts) == ("error", 3)
    assert by_id["never-ok"].error and by_id["never-ok"].error["code"] == "no_capacity"
    assert by_id["fine"].attempts == 1
    assert done.retries == 3 and (done.ok, done.errors) == (2, 1)


def test_cancel_stops_new_jobs_and_resume_runs_only_the_rest(bgrid: Grid) -> None:
    import threading

    bgrid.worker.hold = threading.Event()
    jobs = [{"id": f"j{i}", "argv": ["true"]} for i in range(10)]
    with bgrid.client() as c:
        info = c.create_batch(jobs, concurrency=2)
        time.sleep(0.2)
        cancelling = c.cancel_batch(info.id)
        assert cancelling.state == "cancelling"
        bgrid.worker.hold.set()
        stopped = _finish(c, info.id)
        assert stopped.state == "cancelled" and 0 < stopped.ok < 10
        first = {r.id for r in _all_results(c, info.id)}
        resumed = c.resume_batch(info.id)
        assert resumed.state in ("running", "done")
        done = _finish(c, info.id)
        results = _all_results(c, info.id)
    assert done.state == "done" and done.ok == 10
    assert sorted(r.id for r in results) == sorted(j["id"] for j in jobs)
    execs = [j for j, _ in bgrid.worker.sent if isinstance(j.op, ExecOp)]
    assert len(execs) == 10  # no job ran twice
    assert first <= {r.id for r in results}


def test_bad_jobs_are_refused_before_anything_runs(bgrid: Grid) -> None:
    with bgrid.client() as c:
        with pytest.raises(InvalidInput) as err:
            c.create_batch([{"id": "a", "argv": ["x"]}, {"id": "b"}])
        assert "exactly one of argv" in err.value.message
        with pytest.raises(InvalidInput, match="not unique"):
            c.create_batch([{"id": "a", "argv": ["x"]}, {"id": "a", "argv": ["y"]}])
    r = bgrid.http.post(
        "/v1/batches",
        json={"jobs": [{"id": "a", "argv": ["x"]}, {"id": "b", "shell": "y", "python": "z"}]},
        headers=bgrid.headers(),
    )
    assert r.status_code == 422
    assert r.json()["error"]["context"]["field"].startswith("jobs[1]")
    assert bgrid.worker.sent == []


def test_other_tenants_cannot_see_a_batch(bgrid: Grid) -> None:
    with bgrid.client() as c, bgrid.client(bgrid.token_b) as other:
        info = c.create_batch([{"id": "a", "argv": ["true"]}])
        for call in (
            lambda: other.get_batch(info.id),
            lambda: other.batch_results(info.id),
            lambda: other.cancel_batch(info.id),
            lambda: other.resume_batch(info.id),
        ):
            with pytest.raises(NotFound):
                call()


def test_results_are_json_lines_with_the_next_offset(bgrid: Grid) -> None:
    with bgrid.client() as c:
        info = c.create_batch([{"id": f"j{i}", "argv": ["true"]} for i in range(3)])
        _finish(c, info.id)
    r = bgrid.http.get(f"/v1/batches/{info.id}/results?offset=1", headers=bgrid.headers())
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["X-Sandgrid-Next-Offset"] == "3"
    assert len(r.text.splitlines()) == 2


def test_a_results_offset_past_any_list_is_422_naming_it_not_500(bgrid: Grid) -> None:
    """Schemathesis on the real grid found it: LRANGE refuses an index past 64 bits."""
    with bgrid.client() as c:
        info = c.create_batch([{"id": "j0", "argv": ["true"]}])
    huge = 1 << 63
    r = bgrid.http.get(f"/v1/batches/{info.id}/results?offset={huge}", headers=bgrid.headers())
    assert r.status_code == 422 and "offset" in r.text


def test_the_store_records_a_job_once_even_when_two_runners_race(
    redis_client: redis.Redis[str],
) -> None:
    store = BatchStore(redis_client)
    spec = BatchCreate(jobs=[BatchJob(id="a", argv=["x"]), BatchJob(id="b", argv=["y"])])
    info = store.create("acme", spec)
    assert store.record(info.id, BatchResult(id="a", status="ok"))
    assert not store.record(info.id, BatchResult(id="a", status="failed"))
    assert [j.id for j in store.pending(info.id)] == ["b"]
    assert store.record(info.id, BatchResult(id="b", status="error"))
    done = store.get("acme", info.id)
    assert (done.state, done.ok, done.errors, done.failed) == ("done", 1, 1, 0)
    assert len(store.results(info.id)) == 2


def test_a_batch_without_a_runner_shows_as_interrupted(redis_client: redis.Redis[str]) -> None:
    store = BatchStore(redis_client)
    info = store.create("acme", BatchCreate(jobs=[BatchJob(id="a", argv=["x"])]))
    assert store.get("acme", info.id).state == "interrupted"
    assert store.take_runner(info.id, "me", 5.0)
    assert not store.take_runner(info.id, "other", 5.0)
    assert store.get("acme", info.id).state == "running"
    with pytest.raises(SandgridError):
        store.get("globex", info.id)


def test_a_batch_of_a_type_gets_its_default_quotas(bgrid: Grid) -> None:
    """25.1: a batch's sessions of a type with default quotas are made with them."""
    from sandgrid.sandbox_types import SandboxTypeSpec

    assert bgrid.services.types is not None
    small = SandboxTypeSpec(
        name="python-small", image="a/b:1", runtime="runc", quotas={"memory_mb": 256}
    )
    bgrid.services.types.store.put(small)
    bgrid.services.types.view.refresh()
    with bgrid.client() as c:
        info = c.create_batch([{"id": "j", "shell": "ls"}], type="python-small")
        _finish(c, info.id)
    execs = [j for j, _ in bgrid.worker.sent if isinstance(j.op, ExecOp)]
    assert [j.session.quotas.memory_mb for j in execs] == [256]
