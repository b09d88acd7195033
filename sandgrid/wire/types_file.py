"""The types file (``deploy/types.toml``): the operators' sandbox types, in version control.

Each ``[[type]]`` table is one ``SandboxTypeSpec`` (``sandgrid.sandbox_types``);
its ``source`` is ``file``. A bad entry is refused as a whole file, with the
entry and the field named (``type[2].runtime: ...``), so a typo never half-seeds
the registry. The file is read when the API starts (``TypeStore.seed``) and, as
the catalog of last resort, by a process whose registry has no catalog yet.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sandgrid.errors import InvalidInput
from sandgrid.sandbox_types import SandboxTypeSpec

__all__ = ["load_types_file", "parse_types"]


def load_types_file(path: Path | None) -> list[SandboxTypeSpec]:
    """The types of ``path``; none when it is None or missing.

    Raises:
        InvalidInput: not TOML, or an entry breaks a rule (named with its field).
    """
    if path is None or not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"{path}: not a TOML file: {exc}",
            operation="types.seed",
            context={"field": "types_file", "rule": "TOML"},
        ) from None
    return parse_types(data, where=str(path))


def parse_types(data: dict[str, Any], *, where: str = "types file") -> list[SandboxTypeSpec]:
    """The ``[[type]]`` entries of a parsed types file, each checked.

    Raises:
        InvalidInput: an entry breaks a rule, or two entries share a name.
    """
    entries = data.get("type", [])
    if not isinstance(entries, list):
        raise _bad(where, "type", "must be an array of tables ([[type]])")
    found: dict[str, SandboxTypeSpec] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _bad(where, f"type[{i}]", "must be a table")
        try:
            spec = SandboxTypeSpec.model_validate({**entry, "source": "file"})
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "type"
            rule = first["msg"].removeprefix("Value error, ")
            raise _bad(where, f"type[{i}].{field}", rule) from None
        if spec.name in found:
            raise _bad(where, f"type[{i}].name", f"{spec.name!r} is defined twice")
        found[spec.name] = spec
    return list(found.values())


def _bad(where: str, field: str, rule: str) -> InvalidInput:
    return InvalidInput(
        f"{where}: {field}: {rule}",
        operation="types.seed",
        context={"field": field, "rule": rule},
    )
