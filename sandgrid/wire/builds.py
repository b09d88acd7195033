"""A template's build on the wire: the job a node runs, and the record both sides keep (25.2).

The API writes the record (``TemplateInfo``, state ``building``) and sends a
``BuildJob`` to one node's direct queue; the node runs the build, writes its
log into the record as it goes and its end (``ready`` with the image, or
``failed`` with the step, exit code and reason), and on success registers the
template's type in the catalog itself (``sandgrid.wire.type_store``), so that
a build whose API process went away still lands. A record still ``building``
past its deadline is a build whose node died: the API answers it ``failed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandgrid.models import WireModel
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.templates import TemplateInfo, TemplateSpec
from sandgrid.wire import names

if TYPE_CHECKING:
    import redis

__all__ = ["BuildJob", "TemplateStore", "build_events", "final_event"]


def build_events(build_id: str) -> str:
    """The id of a build's event stream (``sandgrid.wire.turnstream``, as an exec turn's):
    ``stdout`` chunks of its log as they come, then ``result`` (ready) or ``error`` (failed)."""
    return f"build-{build_id}"


def final_event(info: TemplateInfo) -> dict[str, object]:
    """The last event of a build's stream: its record without the log (already streamed);
    a failed build's ``error`` names its step and exit code."""
    template = info.model_dump(mode="json", exclude={"log"})
    if info.state == "ready":
        return {"type": "result", "template": template}
    error = {
        "code": "build_failed",
        "message": info.error or "the build failed",
        "context": {
            "template": info.name,
            "failed_step": info.failed_step,
            "exit_code": info.exit_code,
        },
    }
    return {"type": "error", "error": error, "template": template}


class BuildJob(WireModel):
    """The Celery message of one build.

    Attributes:
        build_id: this build (the image's tag, the egress pseudo-session).
        tenant: who builds it: the only tenant its type serves.
        spec: the template.
        base: the base type's definition (its image, digest, quotas and ceilings).
    """

    v: Literal[1] = 1
    build_id: str = Field(pattern=r"^[0-9a-f]{12,32}$")
    tenant: str
    spec: TemplateSpec
    base: SandboxTypeSpec


class TemplateStore:
    """Templates' records in Redis (one string per tenant and name)."""

    def __init__(self, client: redis.Redis[str]) -> None:
        self.redis = client

    def create(self, info: TemplateInfo) -> bool:
        """Write a new record; False if the name has one (any tenant's) already."""
        key = names.template_key(info.name)
        return bool(self.redis.set(key, info.model_dump_json(), nx=True))

    def get(self, tenant: str | None, name: str) -> TemplateInfo | None:
        """The template ``name`` if ``tenant`` built it (None: an operator, any tenant's)."""
        raw = self.redis.get(names.template_key(name))
        info = TemplateInfo.model_validate_json(raw) if raw else None
        return info if info is not None and tenant in (None, info.tenant) else None

    def put(self, info: TemplateInfo) -> None:
        self.redis.set(names.template_key(info.name), info.model_dump_json())

    def delete(self, name: str) -> None:
        self.redis.delete(names.template_key(name))
