"""The flags of ``sandgrid tenants add|set``: one per field of ``TenantLimits``.

The flags are made from the model's fields, so a limit added to the model is a
flag at once, and the values are validated by the model itself
(``scheduler.tenants.check_limits``), as the API validates them:

* a number or a bool: ``--max-sessions 50``, ``--allow-network true``;
* a list: ``--network-ceiling pypi.org:443 --network-ceiling '*.pythonhosted.org'``
  or ``--types python,python-gvisor``; ``--types ''`` is the empty list;
* a network policy, as JSON: ``--network-default '{"allow": ["pypi.org:443"]}'``;
* ``--clear FIELD`` (``set`` only, repeatable) puts a field back to its default:
  ``--clear types`` allows every type, ``--clear network_default`` is offline.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from sandgrid.errors import InvalidInput
from scheduler.tenants import TenantLimits

__all__ = ["JSON_FIELDS", "LIMIT_FIELDS", "LIST_FIELDS", "flag", "limit_changes", "limit_options"]

F = TypeVar("F", bound=Callable[..., Any])

#: Every field of ``TenantLimits`` (the wire version ``v`` is none of the operator's).
LIMIT_FIELDS = tuple(f for f in TenantLimits.model_fields if f != "v")
#: Fields whose flag is repeatable, each value comma-separated.
LIST_FIELDS = frozenset({"network_ceiling", "types"})
#: Fields whose flag takes a JSON object.
JSON_FIELDS = frozenset({"network_default"})
#: Older spellings kept.
_ALIASES = {"max_concurrent_turns": ("--max-turns",)}


def flag(field: str) -> str:
    """The flag of a field: ``max_sessions`` -> ``--max-sessions``."""
    return "--" + field.replace("_", "-")


def limit_options(*, clear: bool) -> Callable[[F], F]:
    """Add one option per limit (and ``--clear FIELD`` when ``clear``) to a command."""

    def decorate(fn: F) -> F:
        for field in reversed(LIMIT_FIELDS):
            info = TenantLimits.model_fields[field]
            default = info.get_default(call_default_factory=True)
            about = f"{info.description or field.replace('_', ' ')} [default: {default}]"
            if field in LIST_FIELDS:
                about += "; repeatable or comma-separated, '' for none"
            elif field in JSON_FIELDS:
                about += "; a JSON network policy"
            names = (flag(field), *_ALIASES.get(field, ()), field)
            metavar = "ENTRY" if field in LIST_FIELDS else "JSON" if field in JSON_FIELDS else "N"
            if info.annotation is bool:
                metavar = "true|false"
            fn = click.option(*names, multiple=field in LIST_FIELDS, metavar=metavar, help=about)(
                fn
            )
        if clear:
            fn = click.option(
                "--clear", "clear", multiple=True, metavar="FIELD", help="put FIELD back to default"
            )(fn)
        return fn

    return decorate


def limit_changes(given: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The limits the flags give (raw: the model validates them) and the fields to clear.

    Raises:
        InvalidInput: a JSON flag that is not JSON, or a field both given and cleared.
    """
    changes: dict[str, Any] = {}
    for field in LIMIT_FIELDS:
        value = given.get(field)
        if value is None or (field in LIST_FIELDS and not value):
            continue
        if field in LIST_FIELDS:
            changes[field] = [e.strip() for v in value for e in v.split(",") if e.strip()]
        elif field in JSON_FIELDS:
            changes[field] = _json(field, value)
        else:
            changes[field] = value
    cleared = [c.strip().replace("-", "_") for c in given.get("clear", ())]
    if both := sorted(set(cleared) & set(changes)):
        raise InvalidInput(
            f"{both[0]}: given and cleared at once",
            operation="tenants.set",
            context={"field": both[0], "rule": "set or --clear, not both"},
        )
    return changes, cleared


def _json(field: str, value: str) -> Any:
    """A JSON flag's value, or a readable error with an example."""
    try:
        return json.loads(value)
    except ValueError as exc:
        problem = str(exc)
    example = f'{flag(field)} \'{{"allow": ["pypi.org:443"]}}\''
    raise InvalidInput(
        f"{field}: not JSON ({problem}); e.g. {example}",
        operation="tenants.set",
        context={"field": field, "rule": "a JSON network policy"},
    )
