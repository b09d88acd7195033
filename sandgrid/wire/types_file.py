"""The types file (``deploy/types.toml``): the operators' sandbox types, in version control.

Each ``[[type]]`` table is one ``SandboxTypeSpec`` (``sandgrid.sandbox_types``);
its ``source`` is ``file``. A bad entry is refused as a whole file, with the
entry and the field named (``type[2].runtime: ...``), so a typo never half-seeds
the registry. An entry's ``template`` table (a shipped environment, 25.4:
``from`` an earlier entry, ``steps`` as a template's) is the recipe
``deploy/local/images.sh`` builds the entry's image from; it is checked here
and is no part of the type. The file is read when the API starts (``TypeStore.seed``) and, as
the catalog of last resort, by a process whose registry has no catalog yet.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, ValidationError

from sandgrid.errors import InvalidInput
from sandgrid.models import WireModel
from sandgrid.sandbox_types import TYPE_NAME_PATTERN, SandboxTypeSpec
from sandgrid.templates import MAX_STEPS, Step

__all__ = ["ShippedTemplate", "load_types_file", "parse_types"]

_M = TypeVar("_M", bound=WireModel)


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
        entry = dict(entry)
        template = entry.pop("template", None)
        spec = _checked(SandboxTypeSpec, {**entry, "source": "file"}, where, f"type[{i}]")
        if template is not None:
            recipe = _checked(ShippedTemplate, template, where, f"type[{i}].template")
            if recipe.from_ not in found:
                raise _bad(where, f"type[{i}].template.from", "must name an earlier type")
        if spec.name in found:
            raise _bad(where, f"type[{i}].name", f"{spec.name!r} is defined twice")
        found[spec.name] = spec
    return list(found.values())


class ShippedTemplate(WireModel):
    """A types-file entry's ``template`` table: the recipe of a shipped image (25.4).

    Attributes:
        from_: an earlier entry of the file (TOML ``from``), whose image is the base.
        steps: a template's steps (``sandgrid.templates.Step``), run by ``docker build``.
    """

    model_config = WireModel.model_config | {"populate_by_name": True}

    from_: str = Field(alias="from", pattern=TYPE_NAME_PATTERN)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)


def _checked(model: type[_M], data: Any, where: str, at: str) -> _M:
    """``data`` as ``model``, or the first broken rule with its field under ``at``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        rule = first["msg"].removeprefix("Value error, ")
        raise _bad(where, f"{at}.{field}" if field else at, rule) from None


def _bad(where: str, field: str, rule: str) -> InvalidInput:
    return InvalidInput(
        f"{where}: {field}: {rule}",
        operation="types.seed",
        context={"field": field, "rule": rule},
    )
