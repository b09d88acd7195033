"""What ``pip install sandgrid`` brings, and the import layers that keep it so.

``pip install sandgrid`` is the SDK alone; the grid's sides are the extras
``server`` and ``worker``. The import-linter contracts in pyproject.toml keep the
code honest about it; these tests keep the packaging and the contracts' own lists
honest, since a module the SDK contract does not list is a module it never checks.
"""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path
from typing import Any

import sandgrid

ROOT = Path(__file__).resolve().parents[2]
SDK_DEPENDENCIES = {"httpx", "pydantic", "pydantic-settings", "click", "rich", "websockets"}
SERVER_LIBRARIES = {"celery", "kombu", "redis", "docker", "minio", "fastapi", "uvicorn", "flower"}
SDK_CONTRACT = "The SDK needs only its client dependencies"


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def _names(requirements: list[str]) -> set[str]:
    """The distribution names of PEP 508 requirements (no version, extra or marker)."""
    names = set()
    for requirement in requirements:
        name = requirement
        for stop in "[<>=!~; ":
            name = name.split(stop, 1)[0]
        names.add(name.strip().lower())
    return names


def test_base_dependencies_are_the_sdk_only() -> None:
    dependencies = _names(_pyproject()["project"]["dependencies"])
    assert dependencies == SDK_DEPENDENCIES
    assert not dependencies & SERVER_LIBRARIES


def test_the_grid_sides_are_extras() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    assert {"server", "worker"} <= set(extras)
    assert {"celery", "redis", "fastapi", "uvicorn"} <= _names(extras["server"])
    assert {"celery", "redis", "docker", "minio"} <= _names(extras["worker"])


def test_import_linter_is_configured() -> None:
    config = _pyproject()["tool"]["importlinter"]
    assert set(config["root_packages"]) == {"sandgrid", "scheduler", "worker"}
    assert config["include_external_packages"] is True
    independence = [c for c in config["contracts"] if c["type"] == "independence"]
    assert [set(c["modules"]) for c in independence] == [{"scheduler", "worker"}]
    assert "lint-imports" in (ROOT / "Makefile").read_text()


def test_sdk_contract_covers_every_module_but_the_wire() -> None:
    """Every top-level module of ``sandgrid`` but ``wire`` is a source of the SDK
    contract (a package with its ``.**``): a new module is checked from its first day."""
    (contract,) = [
        c
        for c in _pyproject()["tool"]["importlinter"]["contracts"]
        if c["name"].startswith(SDK_CONTRACT)
    ]
    assert contract["as_packages"] is False
    sources = set(contract["source_modules"])
    assert "sandgrid" in sources
    for info in pkgutil.iter_modules(sandgrid.__path__, "sandgrid."):
        if info.name == "sandgrid.wire":
            assert not {s for s in sources if s.startswith("sandgrid.wire")}
            continue
        assert info.name in sources, f"{info.name} is missing from the SDK contract"
        if info.ispkg:
            assert f"{info.name}.**" in sources, f"{info.name}.** is missing"
    forbidden = set(contract["forbidden_modules"])
    assert {"sandgrid.wire", "sandgrid.wire.**", "scheduler.**", "worker.**"} <= forbidden
    assert SERVER_LIBRARIES - {"flower"} <= forbidden
