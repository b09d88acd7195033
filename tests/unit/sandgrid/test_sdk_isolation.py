"""The SDK imports with its client dependencies only: no docker, minio, celery, redis.

Nor does the ``sandgrid`` command line, run as users run it (``python -m sandgrid.cli``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
for blocked in ("docker", "minio"):
    sys.modules[blocked] = None  # any import of them now fails
import sandgrid.client
from sandgrid.client import AsyncClient, Client
Client("http://127.0.0.1:1", "t").close()
heavy = sorted(
    m for m in sys.modules
    if m.split(".")[0] in ("docker", "minio", "celery", "kombu", "redis", "fastapi", "worker")
    and sys.modules[m] is not None
)
assert not heavy, heavy
print("ok")
"""


def test_sdk_imports_without_docker_or_minio() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# What a `pip install sandgrid` user must never pay for: the server and worker
# libraries, the grid's own sides, and the wire between them (it needs celery).
HEAVY = ("celery", "kombu", "redis", "docker", "minio", "fastapi", "uvicorn", "scheduler", "worker")
ROOT = Path(__file__).resolve().parents[3]


# `import MODULE`, or `python -m MODULE ARGS` (runpy is what -m uses), then every module
# loaded: sys.modules, not -X importtime, which misses importlib.import_module (and so
# the command line's entry-point plug-ins).
PROBE = """
import importlib, json, runpy, sys
how, module, args = sys.argv[1], sys.argv[2], sys.argv[3:]
if how == "import":
    importlib.import_module(module)
else:
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code:
            raise
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(how: str, module: str, *args: str) -> tuple[set[str], str]:
    """``import MODULE`` (how="import") or run ``python -m MODULE ARGS`` (how="run") in a
    fresh interpreter; return the modules it imported, and its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, how, module, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stderr.splitlines()[-1])), out.stdout


def _heavy(modules: set[str]) -> list[str]:
    return sorted(
        m
        for m in modules
        if m.split(".")[0] in HEAVY or m == "sandgrid.wire" or m.startswith("sandgrid.wire.")
    )


@pytest.mark.parametrize(
    "args",
    [
        ["import", "sandgrid"],
        ["import", "sandgrid.cli"],
        ["import", "sandgrid.cli.main"],
        ["run", "sandgrid.cli", "batch", "--help"],
    ],
    ids=["import-sandgrid", "import-cli", "import-cli-main", "cli-batch-help"],
)
def test_the_sdk_and_its_command_line_are_light(args: list[str]) -> None:
    modules, _ = _imported(*args)
    assert "sandgrid" in modules  # the probe sees the imports
    assert not _heavy(modules)


def test_top_level_help_imports_no_server_or_worker_library() -> None:
    modules, stdout = _imported("run", "sandgrid.cli", "--help")
    assert "batch" in stdout
    libraries = {m.split(".")[0] for m in _heavy(modules)} - {"scheduler", "worker", "sandgrid"}
    assert not libraries


def test_top_level_help_loads_only_the_plug_in_command_modules() -> None:
    """``sandgrid --help`` lists the plug-ins' one-line help, so it loads their command
    modules (``scheduler.cli``, ``worker.cli``), and nothing else of the grid's sides."""
    modules, stdout = _imported("run", "sandgrid.cli", "--help")
    assert "serve" in stdout and "worker" in stdout
    assert set(_heavy(modules)) <= {"scheduler", "scheduler.cli", "worker", "worker.cli"}
