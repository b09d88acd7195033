"""BFCL multi-turn ground truth on the grid, checked against the host.

The ``bfcl-eval`` wheel (``bfcl_eval-2026.3.23``) ships its data: for each
multi-turn category (``base``, ``miss_func``, ``miss_param``, ``long_context``:
200 entries each, 800 in all) the questions with their ``initial_config`` and
``involved_classes`` in ``bfcl_eval/data/BFCL_v4_multi_turn_<cat>.json``, and
the ground-truth call sequence of every turn in
``bfcl_eval/data/possible_answer/BFCL_v4_multi_turn_<cat>.json`` (JSONL, by
``id``). bfcl's checker executes those calls with
``bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils.execute_multi_turn_func_call``
against its simulated APIs (file system, Twitter, tickets, trading, travel,
vehicle, messages, math), offline.

Each entry becomes one batch job of the ``bfcl`` sandbox type: the program is
``bfcl_entry.py`` (this package), the entry comes on stdin. The same program
runs on the host, one process per entry, one after another: the reference.
A job passes when its stdout is byte-identical to the host's.

Needs ``bfcl_eval`` importable on the host (``pip install --no-deps
bfcl-eval==2026.3.23 mpmath==1.3.0``; its declared dependencies pull in model
clients and torch, which the simulated APIs do not use).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sandgrid.batch.models import BatchJob, BatchResult
from sandgrid.errors import InvalidInput

__all__ = [
    "CATEGORIES",
    "ENTRY_SOURCE",
    "JOB_TIMEOUT_S",
    "Comparison",
    "compare",
    "host_reference",
    "job_for",
    "load_entries",
    "run_on_host",
]

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
ENTRY_SOURCE = (Path(__file__).with_name("bfcl_entry.py")).read_text()
#: Deadline of one entry's job (s): a long-context entry takes well under a second.
JOB_TIMEOUT_S = 60.0


def _data_dir() -> Any:
    try:
        return resources.files("bfcl_eval") / "data"
    except ModuleNotFoundError:
        raise InvalidInput(
            "bfcl_eval is not installed on this host: "
            "pip install --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0",
            operation="bench.bfcl",
            context={"field": "bfcl_eval", "rule": "installed"},
        ) from None


def _jsonl(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def load_entries(
    categories: tuple[str, ...] = CATEGORIES, per_category: int | None = None
) -> list[dict[str, Any]]:
    """The entries of ``categories`` (first ``per_category`` of each), with their
    ground truth: ``id``, ``initial_config``, ``involved_classes``,
    ``ground_truth`` (a list of calls per turn), ``long_context``."""
    data = _data_dir()
    entries: list[dict[str, Any]] = []
    for cat in categories:
        if cat not in CATEGORIES:
            raise InvalidInput(
                f"categories: unknown BFCL multi-turn category {cat!r}",
                context={"field": "categories", "rule": f"one of {', '.join(CATEGORIES)}"},
            )
        questions = _jsonl(data / f"BFCL_v4_multi_turn_{cat}.json")
        answers = {
            a["id"]: a["ground_truth"]
            for a in _jsonl(data / "possible_answer" / f"BFCL_v4_multi_turn_{cat}.json")
        }
        for q in questions[:per_category]:
            entries.append(
                {
                    "id": q["id"],
                    "initial_config": q["initial_config"],
                    "involved_classes": q["involved_classes"],
                    "ground_truth": answers[q["id"]],
                    "long_context": "long_context" in cat,
                }
            )
    return entries


def job_for(entry: dict[str, Any]) -> BatchJob:
    """One entry as a batch job: the entry program, the entry on stdin."""
    return BatchJob(
        id=entry["id"],
        python=ENTRY_SOURCE,
        stdin=json.dumps(entry, sort_keys=True),
        timeout_s=JOB_TIMEOUT_S,
    )


def run_on_host(entry: dict[str, Any], python: str = sys.executable) -> str:
    """The reference: the same program in a new host process; its stdout."""
    out = subprocess.run(
        [python, "-I", "-c", ENTRY_SOURCE],
        input=json.dumps(entry, sort_keys=True),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0:
        return f"exit {out.returncode}: {out.stderr[-2000:]}"
    return out.stdout


def host_reference(entries: list[dict[str, Any]]) -> tuple[dict[str, str], float]:
    """Every entry on the host, one after another; outputs by id and the wall time."""
    t0 = time.perf_counter()
    outputs = {e["id"]: run_on_host(e) for e in entries}
    return outputs, time.perf_counter() - t0


@dataclass
class Comparison:
    """Grid results against the host's outputs."""

    identical: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def all_identical(self) -> bool:
        return not self.different and not self.missing


def compare(grid: list[BatchResult], host: dict[str, str]) -> Comparison:
    """Which entries gave byte-identical stdout on the grid and on the host."""
    by_id = {r.id: r for r in grid}
    report = Comparison()
    for entry_id, expected in host.items():
        got = by_id.get(entry_id)
        if got is None:
            report.missing.append(entry_id)
        elif got.status == "ok" and not got.stdout_truncated and got.stdout == expected:
            report.identical.append(entry_id)
        else:
            report.different.append(entry_id)
    return report
