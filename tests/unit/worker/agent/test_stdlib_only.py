"""The agent package imports nothing but the stdlib and itself, in the worker and in its zipapp.

Each check runs in a fresh interpreter, so what the test process has already
imported cannot hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from worker.agent_client.bundle import PACKAGE, SOURCE_DIR, build_zipapp

MODULES = sorted(p.stem for p in SOURCE_DIR.glob("*.py") if p.stem != "__main__")
ROOT = Path(__file__).resolve().parents[4]

PROBE = """
import importlib, json, sys
before = set(sys.modules)
for name in sys.argv[2:]:
    importlib.import_module(sys.argv[1] + ("." + name if name != "__init__" else ""))
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def loaded(package: str, path: str) -> list[str]:
    """Modules the agent's imports loaded, run with ``path`` first on ``sys.path``."""
    code = f"import sys; sys.path.insert(0, {path!r})\n" + PROBE
    out = subprocess.run(
        [sys.executable, "-I", "-c", code, package, *MODULES],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return list(json.loads(out))


def foreign(modules: list[str], package: str) -> list[str]:
    """The modules that are neither the package's nor the stdlib's."""
    ours = (package, *([] if "." not in package else [package.split(".")[0]]))
    return [
        m
        for m in modules
        if m.split(".")[0] not in sys.stdlib_module_names
        and not any(m == o or m.startswith(package + ".") for o in ours)
    ]


def test_every_module_is_covered() -> None:
    assert {"framing", "limits", "scan", "scanstate", "main", "processes"} <= set(MODULES)


@pytest.mark.parametrize("where", ["checkout", "zipapp"])
def test_agent_imports_only_the_stdlib_and_itself(where: str, tmp_path: Path) -> None:
    if where == "checkout":
        package, path = "worker.agent", str(ROOT)
    else:
        package, path = PACKAGE, str(build_zipapp(tmp_path))
    modules = loaded(package, path)
    assert f"{package}.scan" in modules
    assert foreign(modules, package) == []
    assert not [m for m in modules if m.split(".")[0] in ("sandgrid", "scheduler")]
