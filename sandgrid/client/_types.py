"""The requests of the catalog's routes (``/v1/types``, issue 25.1): one builder a call.

``types`` (every type the caller may use) is in ``_requests``. Reading a type
takes a tenant's token (another tenant's private type is ``NotFound``);
adding and removing one takes the operator's admin token (a ``Client`` made
with it). A definition is a ``SandboxTypeSpec`` or the mapping of its fields,
validated client-side (an ``InvalidInput`` naming the field before any round
trip). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandgrid.client._call import Call, parse_as
from sandgrid.client._validate import as_model
from sandgrid.sandbox_types import SandboxTypeInfo, SandboxTypeSpec

__all__ = ["SandboxTypeLike", "add_type", "get_type", "remove_type", "type_spec"]

#: A type's definition as the SDK takes it: the model, or the mapping of its fields.
SandboxTypeLike = SandboxTypeSpec | Mapping[str, Any]


def type_spec(definition: SandboxTypeLike) -> SandboxTypeSpec:
    """``definition`` as a validated ``SandboxTypeSpec``.

    Raises:
        InvalidInput: a field breaks a rule (named).
    """
    return as_model(SandboxTypeSpec, definition, "types.add", "type")


def get_type(name: str) -> Call[SandboxTypeInfo]:
    """One sandbox type: its definition and the live nodes serving it."""
    return Call("GET", f"/v1/types/{name}", parse_as(SandboxTypeInfo))


def add_type(definition: SandboxTypeLike) -> Call[SandboxTypeInfo]:
    """Add a sandbox type (the admin token): nodes that can serve it start at once,
    without a restart. Its image's digest is resolved by the grid unless given."""
    body = type_spec(definition).model_dump(mode="json", exclude={"source"})
    return Call("POST", "/v1/types", parse_as(SandboxTypeInfo), json=body)


def remove_type(name: str) -> Call[SandboxTypeInfo]:
    """Remove a sandbox type (the admin token); ``Conflict`` (``type_in_use``) while
    sessions of it are open, with their count."""
    return Call("DELETE", f"/v1/types/{name}", parse_as(SandboxTypeInfo))
