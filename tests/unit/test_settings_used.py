"""Every settings field is read somewhere in the code: a field nobody reads is dead.

A dead field is worse than none: its variable is documented, set in deploy
scripts, and silently ignored. The check is a grep for ``.<field>`` in the
packages (not the tests, which may read anything), outside the module that
declares it. It can miss a dead field whose name another attribute shares
(``.bucket``), but it never flags a field that is read.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from pydantic import BaseModel

from sandgrid.settings import ClientSettings
from sandgrid.wire.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sandgrid", "scheduler", "worker")


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, Path]]:
    """``(dotted path, field name, declaring file)`` of every field, nested models' too."""
    declared_in = Path(inspect.getfile(model)).resolve()
    for name, info in model.model_fields.items():
        yield f"{prefix}{name}", name, declared_in
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from fields(kind, f"{prefix}{name}.")


@cache
def _sources(declared_in: Path) -> str:
    files = (p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py")))
    return "\n".join(p.read_text(encoding="utf-8") for p in files if p.resolve() != declared_in)


def _cases() -> Iterator[tuple[str, str, Path]]:
    for model in (Settings, ClientSettings):
        for path, name, module in fields(model):
            yield f"{model.__name__}.{path}", name, module


CASES = list(_cases())


def test_nested_fields_are_walked() -> None:
    paths = {path for path, _, _ in CASES}
    assert {"Settings.minio.bucket", "Settings.worker.snapshots.keep"} <= paths
    assert "ClientSettings.api_url" in paths


@pytest.mark.parametrize(("path", "name", "declared_in"), CASES, ids=[c[0] for c in CASES])
def test_field_is_read(path: str, name: str, declared_in: Path) -> None:
    assert re.search(rf"\.{name}\b", _sources(declared_in)), f"{path}: no module reads it"
