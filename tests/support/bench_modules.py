"""The benchmarks' helper modules, imported as the benchmarks import them (bench/ on
the path: bench/ is not a package)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tests.support.deploy_state import ROOT

__all__ = ["bench_module"]


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py``, imported with bench/ on the path for the import only."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))
