"""One BFCL multi-turn entry, executed from its ground truth: the job's program.

This file is the *source* of every BFCL batch job (``ExecRequest.python``) and
of the host reference run (``python3 -I bfcl_entry.py < entry.json``), so the
grid and the host run exactly the same code. It reads one entry as JSON on
stdin (``id``, ``initial_config``, ``involved_classes``, ``ground_truth``,
``long_context``), executes each turn's ground-truth calls with bfcl_eval's own
``execute_multi_turn_func_call`` against its simulated APIs, and prints one
canonical JSON line: per turn, the execution results and the public state of
every involved instance.

Why one process per entry: ``execute_multi_turn_func_call`` caches the API
instances in its module's globals, keyed by model name and entry id.
Why ``TZ=UTC``: some simulated APIs format timestamps in local time.
Stdlib only (besides bfcl_eval): it runs in the ``bfcl`` sandbox image.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import sys
import time
from typing import Any

__all__ = ["MODEL_NAME", "canonical", "main", "run_entry"]

MODEL_NAME = "sandgrid_ground_truth"


def canonical(value: Any, path: tuple[int, ...] = ()) -> Any:
    """A JSON-able, deterministic picture of ``value``.

    Objects become their class name plus their public attributes (private ones,
    such as modification times, are left out, as bfcl_eval's state checker
    does); a reference back to an enclosing object (a directory's parent) is
    written as its class name only, so cycles end.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, decimal.Decimal | datetime.date | datetime.time):
        return str(value)
    if id(value) in path:
        return {"__ref__": type(value).__name__}
    inner = (*path, id(value))
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda i: str(i[0]))
        return {str(k): canonical(v, inner) for k, v in items}
    if isinstance(value, list | tuple):
        return [canonical(v, inner) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((canonical(v, inner) for v in value), key=json.dumps)
    attrs = getattr(value, "__dict__", None)
    if attrs is None:
        return {"__class__": type(value).__name__, "repr": repr(value)}
    public = {k: v for k, v in attrs.items() if not k.startswith("_")}
    return {"__class__": type(value).__name__, **canonical(public, inner)}


def run_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Execute every turn of one entry's ground truth; results and states per turn."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
    )

    turns = []
    for calls in entry["ground_truth"]:
        results, instances = execute_multi_turn_func_call(
            func_call_list=calls,
            initial_config=entry["initial_config"],
            involved_classes=entry["involved_classes"],
            model_name=MODEL_NAME,
            test_entry_id=entry["id"],
            long_context=bool(entry.get("long_context")),
            is_evaL_run=True,
        )
        state = {name: canonical(inst) for name, inst in sorted(instances.items())}
        turns.append({"results": results, "state": state})
    return {"id": entry["id"], "turns": turns}


def main() -> None:
    os.environ["TZ"] = "UTC"
    time.tzset()
    entry = json.loads(sys.stdin.read())
    out = run_entry(entry)
    sys.stdout.write(json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
