"""Every module of ``sandgrid`` declares ``__all__`` as exactly its public names.

httpx ``tests/test_exported_members.py``, module by module: the rule (what a
public name is) is written once, in ``tests/support/exports.py``.
"""

from __future__ import annotations

import importlib.util

import pytest

import sandgrid
from tests.support.exports import check_exports, module_names

NEEDS_FRAMEWORK = {
    "sandgrid.integrations.agentscope": "agentscope.app",
    "sandgrid.integrations.agentscope.backend": "agentscope.app",
    "sandgrid.integrations.agentscope.manager": "agentscope.app",
    "sandgrid.integrations.agentscope.workspace": "agentscope.app",
}
"""Modules that import a framework kept out of the dev venv (issue 20.4: AgentScope 2.0
runs in a venv of its own), and the module whose absence skips them."""


def _framework_present(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("name", module_names(sandgrid))
def test_all_is_exactly_the_public_names(name: str) -> None:
    needed = NEEDS_FRAMEWORK.get(name)
    if needed is not None and not _framework_present(needed):
        pytest.skip(f"{name} needs {needed}, which this venv does not have")
    check_exports(name)
