"""The client's journal: jobs file checks, exactly-once append, torn lines, sidecar."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandgrid.batch.journal import Journal, Sidecar, SidecarState, file_sha256, read_jobs
from sandgrid.batch.models import BatchResult
from sandgrid.errors import InvalidInput


def _jobs(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_read_jobs_skips_blank_lines_and_keeps_order(tmp_path: Path) -> None:
    path = _jobs(tmp_path, '{"id": "a", "argv": ["true"]}', "", '{"id": "b", "shell": "ls"}')
    assert [j.id for j in read_jobs(path)] == ["a", "b"]


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ('{"id": "a"}', "exactly one of argv, shell, python"),
        ('{"id": "a", "argv": ["x"], "shell": "y"}', "exactly one of argv, shell, python"),
        ('{"id": "", "argv": ["x"]}', "id"),
        ("not json", "json"),
    ],
)
def test_a_bad_job_line_names_the_file_line_and_rule(tmp_path: Path, line: str, rule: str) -> None:
    path = _jobs(tmp_path, '{"id": "ok", "argv": ["true"]}', line)
    with pytest.raises(InvalidInput) as err:
        read_jobs(path)
    assert f"{path}:2" in err.value.message
    assert rule.lower() in err.value.message.lower()


def test_a_repeated_id_is_refused(tmp_path: Path) -> None:
    path = _jobs(tmp_path, '{"id": "a", "argv": ["x"]}', '{"id": "a", "argv": ["y"]}')
    with pytest.raises(InvalidInput, match="repeats line 1"):
        read_jobs(path)


def test_append_writes_each_id_once_and_survives_reopening(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    journal = Journal(out)
    assert journal.load() == set()
    assert journal.append(BatchResult(id="a", status="ok", exit_code=0))
    assert not journal.append(BatchResult(id="a", status="failed", exit_code=1))
    assert journal.append(BatchResult(id="b", status="error"))
    journal.close()
    again = Journal(out)
    assert again.load() == {"a", "b"}
    assert [r.status for r in again.results] == ["ok", "error"]
    assert len(out.read_text().splitlines()) == 2


def test_a_torn_last_line_is_cut_off_and_its_job_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    whole = BatchResult(id="a", status="ok", exit_code=0).model_dump_json() + "\n"
    torn = BatchResult(id="b", status="ok", exit_code=0).model_dump_json()[:25]
    out.write_text(whole + torn)
    journal = Journal(out)
    assert journal.load() == {"a"}
    assert out.read_text() == whole
    journal.append(BatchResult(id="b", status="ok"))
    journal.close()
    assert Journal(out).load() == {"a", "b"}


def test_a_file_that_is_not_a_journal_is_refused_untouched(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    out.write_text('{"hello": 1}\n')
    with pytest.raises(InvalidInput, match="not a batch result"):
        Journal(out).load()
    assert out.read_text() == '{"hello": 1}\n'


def test_sidecar_round_trip_and_removal(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    side = Sidecar(out)
    assert side.load() is None
    jobs = _jobs(tmp_path, '{"id": "a", "argv": ["x"]}')
    state = SidecarState("b-123", file_sha256(jobs), "http://api")
    side.save(state)
    assert side.path.name == "results.jsonl.batch"
    assert side.load() == state
    side.remove()
    assert side.load() is None
