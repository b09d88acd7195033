"""Every module of ``sandgrid`` declares ``__all__`` as exactly its public names.

httpx ``tests/test_exported_members.py``, module by module: the rule (what a
public name is) is written once, in ``tests/support/exports.py``.
"""

from __future__ import annotations

import pytest

import sandgrid
from tests.support.exports import check_exports, module_names


@pytest.mark.parametrize("name", module_names(sandgrid))
def test_all_is_exactly_the_public_names(name: str) -> None:
    check_exports(name)
