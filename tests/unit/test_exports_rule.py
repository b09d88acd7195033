"""The ``__all__`` rule of ``tests/support/exports.py`` says what its docstring says."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.exports import public_names

INIT = """
from typing import TypeVar
from pkg_exports_rule.mod import Thing
from .mod import helper as exported
from os import path
import json
T = TypeVar("T")
__version__ = "1"
"""
MOD = """
import logging
from collections import OrderedDict
from pkg_exports_rule import sibling
log = logging.getLogger(__name__)
LIMIT = 3
LIMIT += 1
A, (B, C) = 1, (2, 3)
Alias: type = int
_private = 0
try:
    import tomllib
    FAST = True
except ImportError:
    FAST = False
if LIMIT:
    class Thing: ...
def helper() -> None:
    inner = 1
"""


@pytest.fixture
def package(tmp_path: Path) -> Iterator[None]:
    root = tmp_path / "pkg_exports_rule"
    root.mkdir()
    (root / "__init__.py").write_text(INIT)
    (root / "mod.py").write_text(MOD)
    (root / "sibling.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("pkg_exports_rule")]:
        del sys.modules[name]


def test_a_module_exports_what_it_defines(package: None) -> None:
    import pkg_exports_rule.mod as mod

    assert public_names(mod) == {"LIMIT", "A", "B", "C", "Alias", "FAST", "Thing", "helper"}


def test_a_package_also_exports_its_own_modules_names(package: None) -> None:
    import pkg_exports_rule as pkg

    assert public_names(pkg) == {"Thing", "exported"}
