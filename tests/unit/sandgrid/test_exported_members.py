"""Every package and module of the control plane declares an accurate ``__all__``."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import scheduler

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(scheduler.__path__, "scheduler.")
    if not m.name.endswith("__main__")
)


@pytest.mark.parametrize("name", ["scheduler", *MODULES])
def test_all_is_declared_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    for member in module.__all__:
        assert hasattr(module, member), f"{name}.__all__ names missing {member!r}"
