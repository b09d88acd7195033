"""The runnable snippets of docs/integrations.md run against the real grid.

Each complete snippet (one that ends in ``asyncio.run(main())``) runs in a
process of its own, with the grid's address and a tenant's token in place of
the documented ones; it must exit 0 and print what the page says it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.grid_fixtures import TOKEN, BatchGrid, batch_grid  # noqa: F401

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _snippets() -> list[str]:
    # AgentScope's snippets need their own venvs: test_agentscope.py and test_agentscope2.py
    blocks = BLOCK.findall(DOC.read_text())
    own_venv = ("agentscope_runtime", "sandgrid.integrations.agentscope")
    return [b for b in blocks if "asyncio.run(main())" in b and not any(v in b for v in own_venv)]


def test_there_are_snippets_for_both_sections() -> None:
    snippets = _snippets()
    assert len(snippets) == 2
    assert "SandgridSandboxClient" in snippets[0] and "ClientSession" in snippets[1]


@pytest.mark.parametrize(("index", "prints"), [(0, "0 b'42\\n'"), (1, "1")])
def test_snippet_runs(batch_grid: BatchGrid, index: int, prints: str) -> None:  # noqa: F811
    code = _snippets()[index].replace("http://127.0.0.1:8700", batch_grid.api_url)
    code = code.replace("<token>", TOKEN)
    env = {**os.environ, "SANDGRID_API_URL": batch_grid.api_url, "SANDGRID_TOKEN": TOKEN}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == prints
