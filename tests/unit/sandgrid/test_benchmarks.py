"""Benchmarks as batch jobs: BFCL entries and their check, AppWorld tasks from a data dir."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandgrid.batch.models import BatchResult
from sandgrid.benchmarks import appworld, bfcl
from sandgrid.benchmarks.bfcl_entry import canonical
from sandgrid.errors import InvalidInput


def test_canonical_is_deterministic_and_ends_cycles() -> None:
    class Node:
        def __init__(self, name: str, parent: object | None = None) -> None:
            self.name = name
            self.parent = parent
            self.children: dict[str, Node] = {}
            self._mtime = 123.0  # private: left out, as bfcl's own state checker does

    root = Node("root")
    root.children["b"] = Node("b", root)
    root.children["a"] = Node("a", root)
    pic = canonical(root)
    assert list(pic["children"]) == ["a", "b"]
    assert pic["children"]["a"]["parent"] == {"__ref__": "Node"}
    assert "_mtime" not in pic and pic["__class__"] == "Node"
    assert canonical({2: {1.5, 0.5}}) == {"2": ["0.5", "1.5"]}


def test_compare_needs_identical_ok_untruncated_output() -> None:
    host = {"a": "x\n", "b": "y\n", "c": "z\n", "d": "w\n"}
    grid = [
        BatchResult(id="a", status="ok", stdout="x\n"),
        BatchResult(id="b", status="ok", stdout="y!\n"),
        BatchResult(id="c", status="ok", stdout="z\n", stdout_truncated=True),
    ]
    report = bfcl.compare(grid, host)
    assert report.identical == ["a"] and report.different == ["b", "c"]
    assert report.missing == ["d"] and not report.all_identical


def test_bfcl_entries_become_jobs_and_run_identically_on_the_host() -> None:
    pytest.importorskip("bfcl_eval")
    entries = bfcl.load_entries(per_category=2)
    assert [e["id"] for e in entries][:2] == ["multi_turn_base_0", "multi_turn_base_1"]
    assert len(entries) == 8 and entries[-1]["long_context"]
    job = bfcl.job_for(entries[0])
    assert job.id == "multi_turn_base_0" and job.python == bfcl.ENTRY_SOURCE
    assert json.loads(job.stdin or "")["ground_truth"] == entries[0]["ground_truth"]
    out = bfcl.run_on_host(entries[0])
    again = subprocess.run(
        [sys.executable, "-c", bfcl.ENTRY_SOURCE],
        input=job.stdin,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "7", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert out == again  # same bytes whatever the hash seed
    turns = json.loads(out)["turns"]
    assert len(turns) == len(entries[0]["ground_truth"])
    assert {"results", "state"} <= set(turns[0])


def test_unknown_bfcl_category_is_refused() -> None:
    pytest.importorskip("bfcl_eval")
    with pytest.raises(InvalidInput, match="unknown BFCL"):
        bfcl.load_entries(("nope",))


def _data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "datasets").mkdir(parents=True)
    (data / "datasets" / "train.txt").write_text("t1\nt2\n\n")
    for task in ("t1", "t2"):
        (data / "tasks" / task / "ground_truth").mkdir(parents=True)
        (data / "tasks" / task / "specs.json").write_text(json.dumps({"id": task}))
        (data / "tasks" / task / "ground_truth" / "solution.py").write_text("pass\n")
    (data / "base_dbs").mkdir()
    (data / "base_dbs" / "amazon.db").write_bytes(b"\x00\x01sqlite")
    (data / "api_docs").mkdir()
    (data / "api_docs" / "standard.json").write_text("{}")
    return data


def test_appworld_tasks_carry_their_own_and_the_shared_data(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    assert appworld.task_ids(data, "train") == ["t1", "t2"]
    jobs = appworld.jobs_for(data, "train", limit=1)
    assert [j.id for j in jobs] == ["t1"]
    paths = {f.path: f for f in jobs[0].files}
    assert set(paths) == {
        "data/tasks/t1/specs.json",
        "data/tasks/t1/ground_truth/solution.py",
        "data/base_dbs/amazon.db",
        "data/api_docs/standard.json",
        "data/datasets/train.txt",
    }  # never another task's directory
    assert base64.b64decode(paths["data/base_dbs/amazon.db"].content) == b"\x00\x01sqlite"
    assert json.loads(jobs[0].stdin or "") == {"task_id": "t1", "experiment": "sandgrid"}
    assert jobs[0].python == appworld.TASK_SOURCE and jobs[0].quotas is not None


def test_appworld_refuses_a_directory_that_is_not_its_data(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"datasets/train\.txt"):
        appworld.task_ids(tmp_path, "train")
    data = _data_dir(tmp_path)
    with pytest.raises(InvalidInput, match="tasks/t9/"):
        appworld.task_files(data, "t9")


def test_appworld_task_passes_only_on_a_successful_evaluation() -> None:
    ok = BatchResult(id="t", status="ok", stdout='noise\n{"success": true, "pass_count": 3}\n')
    assert appworld.passed(ok)
    assert not appworld.passed(ok.model_copy(update={"stdout": '{"success": false}'}))
    assert not appworld.passed(BatchResult(id="t", status="failed", stdout='{"success": true}'))


def test_appworld_program_reports_a_missing_package_clearly() -> None:
    out = subprocess.run(
        [sys.executable, "-I", "-c", appworld.TASK_SOURCE],
        input=json.dumps({"task_id": "t1"}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert json.loads(out.stdout)["error"].startswith("appworld missing")


def test_appworld_selftest_is_one_job_per_offline_test_file() -> None:
    jobs = appworld.selftest_jobs()
    assert len(jobs) == len(appworld.SELFTEST_FILES) == 16
    assert jobs[0].id == "test_admin" and "pytest" in (jobs[0].shell or "")
