"""AgentScope 2.0's own backend and workspace checks, through ``sandgrid.integrations.agentscope``.

The framework runs in a virtual environment of its own (its dependencies are
heavy and pin versions of their own): ``SANDGRID_AGENTSCOPE2_VENV``, by default
``/work/.agentscope2/venv``, made here with ``python3 -m venv`` and ``pip install
'agentscope[service]==2.0.11'`` plus the SDK's own dependencies when it is
missing (that needs PyPI: a failure in CI, a skip elsewhere). This checkout's
``sandgrid`` is put on its ``PYTHONPATH``, so the package under test is the real
one. ``tests/support/agentscope2_checks.py`` runs every check once per sandbox
type (runc, runsc) against a grid of one API and one worker, and writes each
outcome; a test here asserts one check on one runtime.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from sandgrid.localgrid import LocalGrid
from tests.support.agentscope2_checks import CEILING_S, CHECKS
from tests.support.framework_venv import framework_python
from tests.support.one_node_grid import one_node_fixture

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "support" / "agentscope2_checks.py"
TOKEN = "tok-ascope2-" + "f" * 24
AGENTSCOPE_VERSION = "2.0.11"
PORT = int(os.environ.get("SANDGRID_TEST_AGENTSCOPE2_PORT", "8727"))
VENV = Path(os.environ.get("SANDGRID_AGENTSCOPE2_VENV", "/work/.agentscope2/venv"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]


def _sdk_requirements() -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


@pytest.fixture(scope="session")
def agentscope2_python() -> Path:
    """The python of a venv with AgentScope 2.0 and the SDK's dependencies (made when missing)."""
    wanted = [f"agentscope[service]=={AGENTSCOPE_VERSION}", "pytest", *_sdk_requirements()]
    probe = "agentscope.app.workspace_manager, pydantic_settings, pytest"
    return framework_python(VENV, probe, wanted)


grid = one_node_fixture(
    "ascope2",
    port=PORT,
    redis_url=REDIS_URL,
    token=TOKEN,
    limits={"max_timeout_s": CEILING_S},
    types="python,python-gvisor",
)
"""API + one worker (runc and runsc types); the tenant's longest deadline is ``CEILING_S``."""


@pytest.fixture(scope="module", params=RUNTIMES)
def outcomes(
    request: pytest.FixtureRequest,
    grid: LocalGrid,
    agentscope2_python: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, str]:
    """Every check's outcome on one sandbox type (one run of the checks each)."""
    kind = str(request.param)
    out = tmp_path_factory.mktemp(f"ascope2-{kind}") / "out.json"
    argv = [str(agentscope2_python), str(SCRIPT), grid.api_url, TOKEN, kind, str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, f"{proc.stderr[-4000:]}\n{grid.logs()}"
    outcomes: dict[str, str] = json.loads(out.read_text())
    return outcomes


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_agentscope_check(outcomes: dict[str, str], name: str) -> None:
    assert outcomes[name] == "ok", outcomes[name]


def test_the_documented_example_runs(grid: LocalGrid, agentscope2_python: Path) -> None:
    """docs/integrations.md's AgentScope 2.0 example prints what the page says it prints."""
    text = (ROOT / "docs" / "integrations.md").read_text()
    (code,) = [
        b
        for b in re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
        if "sandgrid.integrations.agentscope" in b and "asyncio.run(main())" in b
    ]
    code = code.replace("http://127.0.0.1:8700", grid.api_url).replace("<token>", TOKEN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [str(agentscope2_python), "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "0 b'42\\n'"
