"""A virtual environment of its own for a heavy framework that an integration test drives.

A framework with heavy, pinned dependencies (AgentScope 2.0) stays out of the
dev venv: its tests run its code with the python of a venv made here, with pip,
when the one at ``venv`` cannot import ``probe`` (that needs PyPI). A venv that
cannot be made is a failure in CI and a skip elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

__all__ = ["framework_python"]


def framework_python(venv: Path, probe: str, requirements: list[str]) -> Path:
    """The python of ``venv``, made with ``requirements`` unless it already imports ``probe``."""
    python = venv / "bin" / "python"
    ready = python.exists() and subprocess.run(
        [str(python), "-c", f"import {probe}"], capture_output=True, timeout=120
    )
    if ready and ready.returncode == 0:
        return python
    steps = [
        ([sys.executable, "-m", "venv", str(venv)], 300),
        ([str(python), "-m", "pip", "install", "-q", *requirements], 1800),
    ]
    for argv, timeout in steps:
        try:
            subprocess.run(argv, check=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"cannot make the venv at {venv} ({' '.join(argv[:4])}...): {exc}"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(reason)
            pytest.skip(reason)
    return python
