"""Templates: sandbox types a tenant builds on the grid from a base and steps (issue 25.2).

``POST /v1/templates`` takes a ``TemplateSpec``; the build runs as a job on a
worker node, in a gVisor sandbox of the base image with the build's own quotas
and only the egress the template's ``network`` policy allows, and its result
is committed as a new image, pushed to the grid's registry and registered as a
sandbox type private to the tenant. ``GET /v1/templates/{name}`` answers a
``TemplateInfo``: its state (``building``, ``ready``, ``failed``), its log and,
for a failed step, the step and its exit code. docs/templates.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from sandgrid.models import NetworkPolicy, WireModel
from sandgrid.sandbox_types import IMAGE_PATTERN, TYPE_NAME_PATTERN

__all__ = [
    "MAX_COPY_BYTES",
    "MAX_LOG_BYTES",
    "MAX_STEPS",
    "BuildQuotas",
    "CopyStep",
    "EnvStep",
    "RunStep",
    "Step",
    "TemplateInfo",
    "TemplateSpec",
    "TemplateState",
    "WorkdirStep",
]

#: The steps one template may have.
MAX_STEPS = 64
#: The bytes of files one template's ``copy`` steps may carry, all together.
MAX_COPY_BYTES = 64 << 10
#: The build log kept (its tail): what ``GET /v1/templates/{name}`` shows.
MAX_LOG_BYTES = 64 << 10
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"

TemplateState = Literal["building", "ready", "failed"]


class RunStep(WireModel):
    """A shell command (``sh -c``), run as root inside the build sandbox only."""

    run: str = Field(min_length=1, max_length=16 << 10)


class CopyStep(WireModel):
    """Files to write: absolute path -> text content."""

    copy_: dict[str, str] = Field(alias="copy", min_length=1, max_length=64)

    @field_validator("copy_")
    @classmethod
    def _paths(cls, v: dict[str, str]) -> dict[str, str]:
        for path in v:
            if not path.startswith("/") or "\0" in path or ".." in path.split("/"):
                raise ValueError(f"copy: {path!r} is not an absolute path without '..'")
        return v


class EnvStep(WireModel):
    """Variables set for the later steps and in the image's environment."""

    env: dict[str, str] = Field(min_length=1, max_length=64)

    @field_validator("env")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not re.match(_ENV_NAME, name):
                raise ValueError(f"env: {name!r} is not a variable name")
        return v


class WorkdirStep(WireModel):
    """The directory the later steps run in."""

    workdir: str = Field(pattern=r"^/[^\x00]{0,1023}$")


Step = Annotated[RunStep | CopyStep | EnvStep | WorkdirStep, Field(union_mode="left_to_right")]


class BuildQuotas(WireModel):
    """The build's own limits, checked against the tenant's (422 naming the field)."""

    cpus: float = Field(1.0, gt=0, le=64)
    memory_mb: int = Field(1024, ge=128, le=1 << 20)
    timeout_s: float = Field(600.0, gt=0, le=24 * 3600, description="the whole build")
    image_mb: int = Field(2048, ge=1, le=1 << 20, description="the image built, base included")


class TemplateSpec(WireModel):
    """Body of ``POST /v1/templates``.

    Attributes:
        name: the template's name, which is also its sandbox type's.
        from_: the base (JSON ``from``): a sandbox type the tenant may use, or an image
            reference (``repo:tag``, a ``/`` or ``:`` in it) already in the grid's registry.
        steps: run in order; the first failing one ends the build.
        network: the build's egress policy (None: no network at all).
        quotas: the build sandbox's CPU, memory, time and the image's size.
    """

    model_config = WireModel.model_config | {"populate_by_name": True}

    v: Literal[1] = 1
    name: str = Field(pattern=TYPE_NAME_PATTERN)
    from_: str = Field(alias="from", pattern=IMAGE_PATTERN)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)
    network: NetworkPolicy | None = None
    quotas: BuildQuotas = Field(default_factory=BuildQuotas)

    @field_validator("steps")
    @classmethod
    def _copy_size(cls, v: list[Step]) -> list[Step]:
        total = sum(
            len(p) + len(c.encode())
            for s in v
            if isinstance(s, CopyStep)
            for p, c in s.copy_.items()
        )
        if total > MAX_COPY_BYTES:
            raise ValueError(f"steps: copy steps carry {total} bytes, above {MAX_COPY_BYTES}")
        return v


class TemplateInfo(WireModel):
    """A template as ``GET /v1/templates/{name}`` answers it.

    Attributes:
        state: ``building``, ``ready`` (its type exists) or ``failed``.
        log: the build's output, its last ``MAX_LOG_BYTES``.
        error: why it failed (None unless failed).
        failed_step: the index of the step that failed, if a step did.
        exit_code: that step's exit code.
        image: the image in the grid's registry (ready only), ``digest`` its digest.
    """

    v: Literal[1] = 1
    name: str
    tenant: str
    base: str
    build_id: str
    state: TemplateState
    log: str = ""
    error: str | None = None
    failed_step: int | None = None
    exit_code: int | None = None
    image: str | None = None
    digest: str | None = None
    created: float = 0.0
    finished: float | None = None
    deadline: float = 0.0
