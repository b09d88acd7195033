"""One AppWorld task, solved by its ground truth and evaluated: the job's program.

Runs in the ``appworld`` sandbox (the ``appworld`` package, pydantic < 2) as
the ``python`` source of a batch job; the task's data is in
``/workspace/data`` (``APPWORLD_ROOT=/workspace``). Reads ``{"task_id",
"experiment"}`` on stdin and prints one JSON line: the evaluation's stats
(``success``, pass and fail counts), as ``appworld verify tasks`` computes them
for each task. Without ``appworld`` importable, or without the task's data, it
prints the reason and exits 2, so a misconfigured grid reads as such.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["main", "solve"]


def solve(task_id: str, experiment: str) -> dict[str, Any]:
    """Execute the task's compiled ground-truth solution, then evaluate it."""
    from appworld import AppWorld, update_root

    update_root(os.environ.get("APPWORLD_ROOT", os.getcwd()))
    with AppWorld(
        task_id=task_id,
        experiment_name=experiment,
        raise_on_failure=False,
        ground_truth_mode="full",
    ) as world:
        code = world.task.ground_truth.compiled_solution_code + "\nsolution(apis, requester)"
        world.execute(code)
        stats: dict[str, Any] = world.evaluate().to_dict(stats_only=True)
    return {"task_id": task_id, **stats}


def main() -> None:
    spec = json.loads(sys.stdin.read())
    try:
        out = solve(spec["task_id"], spec.get("experiment", "sandgrid"))
    except ImportError as exc:
        print(json.dumps({"task_id": spec.get("task_id"), "error": f"appworld missing: {exc}"}))
        sys.exit(2)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"task_id": spec.get("task_id"), "error": why}))
        sys.exit(2)
    print(json.dumps(out, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
