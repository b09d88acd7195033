"""``sandgrid batch run``: the results file as a journal, resume, re-attach, Ctrl-C."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

import sandgrid.cli.batch
from sandgrid.batch.journal import Sidecar, SidecarState, file_sha256
from sandgrid.batch.models import BatchResult
from sandgrid.cli import main
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.settings import Settings, get_settings
from scheduler.batch.capacity import StaticCapacity
from scheduler.batch.run import RetryPolicy
from tests.support.fakes import Grid, make_grid


@pytest.fixture
def cgrid(
    redis_client: redis.Redis[str], test_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Grid]:
    import sandgrid.client

    for grid in make_grid(redis_client, test_settings):
        manager = grid.services.batches
        assert manager is not None
        manager.turns.dispatcher = grid.worker  # batches have a turn runner of their own
        manager.capacity = StaticCapacity({grid.worker.node: 3})
        manager.policy = RetryPolicy(base_s=0.01, cap_s=0.02)
        monkeypatch.setattr(sandgrid.client, "Client", grid.client)
        monkeypatch.setenv("SANDGRID_TOKEN", grid.token_a)
        get_settings.cache_clear()
        yield grid
        get_settings.cache_clear()


def _jobs_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"j{i}", "argv": ["echo", str(i)]}) + "\n" for i in range(n))
    )
    return path


def _ids(out: Path) -> list[str]:
    return [json.loads(line)["id"] for line in out.read_text().splitlines()]


def _execs(grid: Grid) -> int:
    return sum(1 for j, _ in grid.worker.sent if isinstance(j.op, ExecOp))


def _run(jobs: Path, out: Path, *extra: str) -> object:
    args = ["batch", "run", str(jobs), "--out", str(out), "--poll", "0.02", *extra]
    return CliRunner().invoke(main, args)


def test_run_writes_one_line_per_job_and_a_summary(cgrid: Grid, tmp_path: Path) -> None:
    jobs, out = _jobs_file(tmp_path, 12), tmp_path / "results.jsonl"
    result = _run(jobs, out, "--concurrency", "3")
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert sorted(_ids(out)) == sorted(f"j{i}" for i in range(12))
    stderr = result.stderr  # type: ignore[attr-defined]
    assert "batch summary" in stderr and "12/12 done" in stderr  # plain lines: not a terminal
    assert not Sidecar(out).path.exists()


def test_a_second_run_submits_only_jobs_without_a_result(cgrid: Grid, tmp_path: Path) -> None:
    jobs, out = _jobs_file(tmp_path, 10), tmp_path / "results.jsonl"
    done = "".join(BatchResult(id=f"j{i}", status="ok").model_dump_json() + "\n" for i in range(4))
    out.write_text(done + '{"id": "j4", "sta')  # killed while writing j4's line
    result = _run(jobs, out)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert sorted(_ids(out)) == sorted(f"j{i}" for i in range(10))
    assert _execs(cgrid) == 6
    again = _run(jobs, out)
    assert again.exit_code == 0 and "already have a result" in again.stderr  # type: ignore[attr-defined]
    assert _execs(cgrid) == 6


def test_a_second_run_re_attaches_to_the_server_batch(cgrid: Grid, tmp_path: Path) -> None:
    jobs, out = _jobs_file(tmp_path, 5), tmp_path / "results.jsonl"
    with cgrid.client() as c:
        info = c.create_batch([{"id": f"j{i}", "argv": ["echo", str(i)]} for i in range(5)])
    Sidecar(out).save(SidecarState(info.id, file_sha256(jobs), "http://testserver"))
    result = _run(jobs, out)
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    assert "re-attached" in result.stderr  # type: ignore[attr-defined]
    assert sorted(_ids(out)) == sorted(f"j{i}" for i in range(5))
    assert _execs(cgrid) == 5  # nothing ran twice


def test_ctrl_c_cancels_and_the_same_command_finishes(
    cgrid: Grid, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, out = _jobs_file(tmp_path, 8), tmp_path / "results.jsonl"
    cgrid.worker.hold = threading.Event()
    follow = sandgrid.cli.batch.follow

    def interrupted(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sandgrid.cli.batch, "follow", interrupted)
    first = _run(jobs, out, "--concurrency", "2")
    assert first.exit_code == 130, first.output  # type: ignore[attr-defined]
    assert "run the same command again" in first.stderr  # type: ignore[attr-defined]
    state = Sidecar(out).load()
    assert state is not None
    with cgrid.client() as c:
        assert c.get_batch(state.batch_id).state == "cancelling"
    cgrid.worker.hold.set()
    monkeypatch.setattr(sandgrid.cli.batch, "follow", follow)
    second = _run(jobs, out)
    assert second.exit_code == 0, second.output  # type: ignore[attr-defined]
    assert sorted(_ids(out)) == sorted(f"j{i}" for i in range(8))
    assert _execs(cgrid) == 8


def test_a_bad_jobs_file_is_a_readable_error(cgrid: Grid, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"id": "a"}\n')
    result = _run(jobs, tmp_path / "out.jsonl")
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert "error[invalid_input]" in result.stderr and "jobs.jsonl:1" in result.stderr  # type: ignore[attr-defined]
