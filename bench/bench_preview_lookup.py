"""A preview request's cost on the API side, before and after a change, in one run.

Run: ``PYTHONPATH=. python bench/bench_preview_lookup.py --base fe9cd63 [--rounds 3]
[--runs 300]``.

The in-process API (``tests.support.fakes``) on Redis, its fake worker owning one
session whose port listener is ``tests.support.port_listener`` (no sandbox): what
is measured is the API's own part of a preview request (verify the token, look
the session and its owner up, the hello, the relay), not a worker's. ``--base``
is exported (``git archive``) and run alternately with this tree, one child
process a round each, so both see the same machine. Per tree it prints the p50
of a GET through a preview URL with the owner cached (``warm``) and with the
cache emptied before each request (``cold``: the lookup's read every time), and
the Redis commands a request sends, counted with MONITOR (``rt``: sent by the
API; a pipeline's commands count one each), with the ratios change/base.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _services import shared_redis_url
from _stats import pct

#: This tree (the change); a child imports the grid from the tree ``PYTHONPATH`` names.
HERE = Path(__file__).resolve().parents[1]

COUNTED = 20


def _listener_class() -> Any:
    """``PortListener`` of this tree, whichever tree the child imports the grid from."""
    spec = importlib.util.spec_from_file_location(
        "port_listener", HERE / "tests" / "support" / "port_listener.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PortListener


def _timed(get: Any, path: str, runs: int, before: Any) -> list[float]:
    out = []
    for _ in range(runs):
        before()
        t0 = time.perf_counter()
        assert get(path).status_code == 200
        out.append((time.perf_counter() - t0) * 1000)
    return out


def child(redis_url: str, runs: int) -> dict[str, float]:
    """One tree's figures (the tree is what ``PYTHONPATH`` names)."""
    import redis

    from sandgrid.wire.settings import Settings
    from scheduler.ports import tunnel
    from tests.support.fakes import make_grid
    from tests.support.redis_monitor import recorded

    client: redis.Redis[str] = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushdb()
    listener = _listener_class()()
    grids = make_grid(client, Settings(redis_url=redis_url, auth_cache_s=0.0))
    grid = next(grids)
    try:
        sid = grid.http.post("/v1/sessions", json={}, headers=grid.headers()).json()["id"]
        exec_path = f"/v1/sessions/{sid}/exec"
        grid.http.post(exec_path, json={"argv": ["true"]}, headers=grid.headers())
        grid.services.registry.ledger.heartbeat(grid.worker.node, 600, ports_addr=listener.addr)
        url = grid.http.post(f"/v1/sessions/{sid}/ports/8000/url", headers=grid.headers())
        path = url.json()["path"]
        figures: dict[str, float] = {}
        for name, before in (("warm", lambda: None), ("cold", tunnel._owners.clear)):
            _timed(grid.http.get, path, 20, before)
            figures[f"{name}_p50_ms"] = pct(_timed(grid.http.get, path, runs, before), 50)
            with recorded(redis_url) as seen:
                _timed(grid.http.get, path, COUNTED, before)
            figures[f"{name}_rt"] = sum(1 for src, _, _ in seen if src == "rt") / COUNTED
        return figures
    finally:
        grids.close()
        listener.shutdown()
        listener.server_close()
        client.flushdb()


def _export(rev: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", rev], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    url = shared_redis_url(args.redis_url)
    os.environ.setdefault("SANDGRID_ALLOW_INSECURE_DEFAULTS", "1")
    if args.child:
        print(json.dumps(child(url, args.runs)))
        return
    seen: dict[str, list[dict[str, float]]] = {"base": [], "change": []}
    with tempfile.TemporaryDirectory(prefix="bench-preview-base-") as base:
        _export(args.base, Path(base))
        for _ in range(args.rounds):
            for name, tree in (("base", base), ("change", str(HERE))):
                argv = [sys.executable, __file__, "--child", "--runs", str(args.runs)]
                argv += ["--redis-url", args.redis_url]
                env = {**os.environ, "PYTHONPATH": tree}
                out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
                seen[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| figure | base | change | change / base |")
    print("|---|---|---|---|")
    for key in seen["base"][0]:
        b = statistics.median(r[key] for r in seen["base"])
        c = statistics.median(r[key] for r in seen["change"])
        print(f"| {key} | {b:.2f} | {c:.2f} | {c / b if b else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
