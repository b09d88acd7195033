"""Batches on the real grid: a 1,000-job batch killed midway and finished by the same
command, Ctrl-C and resume, one fresh sandbox per job, Flower, BFCL.

The grid (API, two workers with two threads each, Flower) is started once for the
module by ``grid_fixtures.batch_grid``; each test's runtime is kept small.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import docker
import pytest

from sandgrid.client import Client
from tests.support.grid_fixtures import (
    NODES,
    TOKEN,
    TYPES,
    WARM_PER_TYPE,
    BatchGrid,
    batch_grid,
    kill_group,
)

pytestmark = pytest.mark.integration
__all__ = ["batch_grid"]  # the fixture, imported for this module


def _jobs(path: Path, n: int, argv: list[str]) -> Path:
    path.write_text(
        "".join(json.dumps({"id": f"job-{i:04d}", "argv": argv}) + "\n" for i in range(n))
    )
    return path


def _lines(out: Path) -> list[dict[str, object]]:
    if not out.exists():
        return []
    return [json.loads(x) for x in out.read_text().splitlines() if x.endswith("}")]


def _wait_lines(out: Path, n: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while len(_lines(out)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} results after {timeout}s"
        time.sleep(0.05)


def _run(grid: BatchGrid, jobs: Path, out: Path, *extra: str, timeout: float = 110) -> str:
    proc = grid.cli("batch", "run", str(jobs), "--out", str(out), "--poll", "0.2", *extra)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()[-3000:]
    return err.decode()


def test_a_1000_job_batch_killed_midway_finishes_with_the_same_command(
    batch_grid: BatchGrid, tmp_path: Path
) -> None:
    jobs, out = _jobs(tmp_path / "jobs.jsonl", 1000, ["true"]), tmp_path / "results.jsonl"
    t0 = time.monotonic()
    args = ("batch", "run", str(jobs), "--out", str(out), "--isolation", "lane")
    first = batch_grid.cli(*args, "--concurrency", "8", "--poll", "0.2")
    _wait_lines(out, 300)
    kill_group(first)  # kill -9: no cancel reaches the server
    killed_at = len(_lines(out))
    assert 300 <= killed_at < 1000
    err = _run(batch_grid, jobs, out, "--isolation", "lane", "--concurrency", "8")
    assert "re-attached" in err
    ids = [str(line["id"]) for line in _lines(out)]
    assert len(ids) == 1000 and set(ids) == {f"job-{i:04d}" for i in range(1000)}
    assert len(out.read_text().splitlines()) == 1000  # every id exactly once, no torn line
    assert Counter(str(line["status"]) for line in _lines(out)) == {"ok": 1000}
    assert time.monotonic() - t0 < 120
    with Client(batch_grid.api_url, TOKEN) as c:
        assert c.list_sessions() == []  # the lanes were closed


def test_ctrl_c_cancels_and_the_same_command_resumes_on_clean_lanes(
    batch_grid: BatchGrid, tmp_path: Path
) -> None:
    probe = (  # what the job before left: files, background processes
        "find /tmp /workspace /home/sandbox /dev/shm -mindepth 1 | wc -l;"
        " pgrep -u 1000 -x sleep | wc -l;"
        " touch /tmp/x /workspace/y $HOME/z /dev/shm/s; sleep 60 >/dev/null 2>&1 &"
    )
    jobs = _jobs(tmp_path / "jobs.jsonl", 150, ["sh", "-c", probe])
    out = tmp_path / "results.jsonl"
    first = batch_grid.cli("batch", "run", str(jobs), "--out", str(out), "--isolation", "lane")
    _wait_lines(out, 20)
    err = kill_group(first, signal.SIGINT)
    assert first.returncode == 130, err
    assert "run the same command again" in err
    _run(batch_grid, jobs, out, "--isolation", "lane")
    lines = _lines(out)
    assert sorted(str(line["id"]) for line in lines) == [f"job-{i:04d}" for i in range(150)]
    assert {str(line["stdout"]) for line in lines} == {"0\n0\n"}  # each lane job starts clean


def test_job_isolation_gives_each_job_a_fresh_sandbox_and_leaves_nothing(
    batch_grid: BatchGrid, tmp_path: Path
) -> None:
    rows = [
        {
            "id": f"f{i}",
            "shell": "cat in.txt; ls -A /tmp | wc -l; touch /tmp/mark",
            "files": [{"path": "in.txt", "content": f"input {i}\n"}],
        }
        for i in range(6)
    ]
    rows.append({"id": "fails", "argv": ["sh", "-c", "exit 7"]})
    jobs, out = tmp_path / "jobs.jsonl", tmp_path / "results.jsonl"
    jobs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run(batch_grid, jobs, out, "--isolation", "job", "--concurrency", "4")
    by_id = {str(line["id"]): line for line in _lines(out)}
    for i in range(6):
        assert by_id[f"f{i}"]["stdout"] == f"input {i}\n0\n"  # no other job's /tmp/mark
    assert (by_id["fails"]["status"], by_id["fails"]["exit_code"]) == ("failed", 7)
    assert by_id["fails"]["attempts"] == 1
    with Client(batch_grid.api_url, TOKEN) as c:
        assert c.list_sessions() == []
    _assert_only_warm_containers_left()


def _assert_only_warm_containers_left() -> None:
    """The grid's nodes hold their warm pools, nothing else: each job's container was
    destroyed right after it."""
    warm = WARM_PER_TYPE * len(TYPES) * len(NODES)
    client = docker.from_env()
    deadline = time.monotonic() + 30
    while True:
        ours = [
            c
            for node in NODES
            for c in client.containers.list(all=True, filters={"label": f"sandgrid.worker={node}"})
        ]
        if len(ours) <= warm or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(ours) <= warm, [c.name for c in ours]


def test_flower_shows_the_workers_and_the_batch_tasks_behind_basic_auth(
    batch_grid: BatchGrid, tmp_path: Path
) -> None:
    secret = "file-content-that-must-not-show"
    row = {
        "id": "fl",
        "shell": "cat s.txt >/dev/null",
        "files": [{"path": "s.txt", "content": secret}],
    }
    jobs, out = tmp_path / "jobs.jsonl", tmp_path / "results.jsonl"
    jobs.write_text(json.dumps(row) + "\n")
    _run(batch_grid, jobs, out)
    assert batch_grid.flower("/api/workers", auth=False).status_code == 401
    workers = batch_grid.flower("/api/workers?refresh=1").json()
    assert {w.split("@")[0] for w in workers} >= {"batch-w1", "batch-w2"}
    deadline = time.monotonic() + 15
    while True:
        tasks = batch_grid.flower("/api/tasks?limit=1000").json()
        turns = [t for t in tasks.values() if t.get("name") == "sandgrid.turn"]
        shown = " ".join(str(t.get("args")) for t in turns)
        if "op=exec shell=(20 chars)" in shown or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # Flower shows ids, kinds and sizes only, never a command, a path or a content (23.5)
    assert "op=exec shell=(20 chars)" in shown, shown[:2000]
    assert f"op=write files=1 ({len(secret)} chars)" in shown and " batch" in shown
    assert secret not in json.dumps(tasks) and "s.txt" not in json.dumps(tasks)


def test_bfcl_subset_matches_the_host(batch_grid: BatchGrid, tmp_path: Path) -> None:
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("bfcl_eval missing in CI (deploy/local/python.sh installs it)")
        pytest.skip("bfcl_eval is not installed (deploy/local/python.sh installs it)")
    proc = batch_grid.cli(
        "bench", "bfcl", "--per-category", "5", "--concurrency", "4", "--workdir", str(tmp_path)
    )
    stdout, stderr = proc.communicate(timeout=110)
    text = stdout.decode()
    assert proc.returncode == 0, text + stderr.decode()[-3000:]
    assert "20/20" in text


def test_appworld_offline_selftest_runs_in_its_sandbox(
    batch_grid: BatchGrid, tmp_path: Path
) -> None:
    """What AppWorld can check without its downloaded data: its own app tests, in the
    ``appworld`` sandbox (pydantic < 2, ``appworld install`` done), as batch jobs."""
    proc = batch_grid.cli(
        "bench", "appworld", "--selftest", "--limit", "3", "--workdir", str(tmp_path)
    )
    stdout, stderr = proc.communicate(timeout=110)
    text = stdout.decode()
    assert proc.returncode == 0, text + stderr.decode()[-3000:]
    assert "appworld-selftest: 3/3 passed" in text
    lines = _lines(tmp_path / "appworld-selftest-results.jsonl")
    assert {str(line["id"]) for line in lines} == {
        "test_admin",
        "test_supervisor",
        "test_simple_note",
    }
    assert all(" passed" in str(line["stdout"]) for line in lines)
