"""Every benchmark starts as ``make bench`` runs it: the venv's Python, from the
repository's root, nothing on ``PYTHONPATH`` (a benchmark that imports the tests'
helpers puts the root on its path itself)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.deploy_state import ROOT

BENCHES = sorted(p.name for p in (ROOT / "bench").glob("bench_*.py"))


def test_make_bench_runs_benchmarks_that_exist() -> None:
    make = (ROOT / "Makefile").read_text()
    named = [w.removeprefix("bench/") for w in make.split() if w.startswith("bench/bench_")]
    assert named and set(named) <= set(BENCHES), named


@pytest.mark.parametrize("bench", BENCHES)
def test_a_benchmark_answers_its_help_without_a_pythonpath(bench: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, f"bench/{bench}", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
