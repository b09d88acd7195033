"""The rule behind every ``test_exported_members``: ``__all__`` lists exactly the public names.

A module's *public names* are the names bound at its top level (``def``,
``class``, assignments, also inside top-level ``if``/``try``/``with`` blocks;
never inside a function or class) that do not start with ``_``, except:

- names bound by ``import`` or ``from ... import``: they are someone else's;
  but in a package's ``__init__``, a name imported from the package's own
  sub-modules is a re-export and *is* public (``from sandgrid.client import
  Client`` in ``sandgrid/__init__.py``);
- values that are modules, type variables (``TypeVar``, ``ParamSpec``,
  ``TypeVarTuple``) or loggers: plumbing of the module, never its API.

``__all__`` may also hold ``__version__``. The test then asserts
``set(__all__) == public names``: a public name left out of ``__all__`` is
either API nobody declared or a private helper that should be ``_named``; a
name in ``__all__`` that is not public is a stale or borrowed export.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import pkgutil
import types
from collections.abc import Iterator, Mapping
from typing import Any, ParamSpec, TypeVar, TypeVarTuple

import pytest

__all__ = ["ALLOWED_DUNDERS", "check_exports", "module_names", "module_params", "public_names"]

ALLOWED_DUNDERS = frozenset({"__version__"})
_PLUMBING = (types.ModuleType, TypeVar, ParamSpec, TypeVarTuple, logging.Logger)


def module_names(package: types.ModuleType) -> list[str]:
    """The package and every module under it, but ``__main__`` (running it has effects)."""
    found = pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    return [package.__name__, *sorted(m.name for m in found if not m.name.endswith("__main__"))]


def module_params(package: types.ModuleType, pending: Mapping[str, str] | None = None) -> list[Any]:
    """``module_names`` as test parameters, each module of ``pending`` an xfail with its
    reason (modules another branch is rewriting; the entry goes once they pass)."""
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=False, reason=pending[name]))
        if pending and name in pending
        else name
        for name in module_names(package)
    ]


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run at import time, through ``if``/``try``/``with`` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _top_level(node.body)
            yield from _top_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)


def _targets(node: ast.stmt) -> Iterator[str]:
    """The names a definition or an assignment binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id


def _is_own(module: types.ModuleType, node: ast.ImportFrom) -> bool:
    """Whether a ``from`` import of a package's ``__init__`` comes from the package."""
    if module.__spec__ is None or not module.__spec__.submodule_search_locations:
        return False
    if node.level:
        return node.level == 1
    return (node.module or "").startswith(f"{module.__name__}.")


def public_names(module: types.ModuleType) -> set[str]:
    """The public names of ``module`` by the rule in this module's docstring."""
    tree = ast.parse(inspect.getsource(module))
    own: set[str] = set()
    imported: set[str] = set()
    for node in _top_level(tree.body):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                if isinstance(node, ast.ImportFrom) and _is_own(module, node):
                    own.add(name)
                else:
                    imported.add(name)
        else:
            own.update(_targets(node))
    return {
        name
        for name in own - imported
        if not name.startswith("_") and not isinstance(getattr(module, name, None), _PLUMBING)
    }


def check_exports(name: str) -> None:
    """Assert the rule for the module ``name``, with a message that says what to fix."""
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    declared = set(module.__all__) - ALLOWED_DUNDERS
    public = public_names(module)
    assert len(module.__all__) == len(set(module.__all__)), f"{name}.__all__ has duplicates"
    missing, extra = sorted(public - declared), sorted(declared - public)
    assert not missing and not extra, (
        f"{name}: public but not in __all__: {missing}; in __all__ but not public: {extra}"
    )
