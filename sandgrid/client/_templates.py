"""The requests of ``/v1/templates`` (issue 25.2): one builder a call, and ``client.templates``.

A template is a ``TemplateSpec`` or the mapping of its fields (``from`` as in
the JSON body), validated client-side: an ``InvalidInput`` naming the field
before any round trip. ``client.templates`` is a small namespace over the
client's own methods (``build_template``, ``get_template``), so that it is the
same on ``Client`` and ``AsyncClient`` (on the async one its methods return
coroutines). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandgrid.client._call import Call, parse_as
from sandgrid.client._validate import as_model
from sandgrid.templates import TemplateInfo, TemplateSpec

__all__ = ["TemplateLike", "Templates", "build_template", "get_template", "template_spec"]

#: A template as the SDK takes it: the model, or the mapping of its fields.
TemplateLike = TemplateSpec | Mapping[str, Any]


def template_spec(definition: TemplateLike) -> TemplateSpec:
    """``definition`` as a validated ``TemplateSpec``.

    Raises:
        InvalidInput: a field breaks a rule (named).
    """
    return as_model(TemplateSpec, definition, "templates.build", "template")


def build_template(definition: TemplateLike) -> Call[TemplateInfo]:
    """Start building a template on the grid; it answers ``state = building``.

    Follow it with ``get_template(name)`` until ``ready`` (its type exists:
    sessions name it as ``type``) or ``failed`` (``error``, ``failed_step``,
    ``exit_code`` and ``log`` say why).
    """
    body = template_spec(definition).model_dump(mode="json", by_alias=True)
    return Call("POST", "/v1/templates", parse_as(TemplateInfo), json=body)


def get_template(name: str) -> Call[TemplateInfo]:
    """A template's state (``building``, ``ready``, ``failed``), its log, and why it failed."""
    return Call("GET", f"/v1/templates/{name}", parse_as(TemplateInfo))


class Templates:
    """``client.templates``: ``build(definition)`` and ``get(name)`` of the client's methods."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def build(self, definition: TemplateLike) -> Any:
        """``client.build_template(definition)``."""
        return self._client.build_template(definition)

    def get(self, name: str) -> Any:
        """``client.get_template(name)``."""
        return self._client.get_template(name)
