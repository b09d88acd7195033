"""A sandbox type as data: what ``deploy/types.toml`` holds and ``POST /v1/types`` takes.

A type is the grid's unit of routing (queue ``sbx.<type>``) and of warm pools.
Its definition names the image (by tag, and by the digest resolved when it was
seeded or added), the runtime its sandboxes run under, the quotas a session
gets when it names none and the ceilings a session may ask up to (a tenant's
own ``type_ceilings`` override them), the egress defaults, the warm pool each
node keeps, and who may use it: every tenant, or one (a private type). The
catalog of types lives in the registry (``sandgrid.wire.type_store``); this
module is only the model, shared by the SDK, the API and the workers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sandgrid.models import NetworkPolicy, Quotas, WireModel

__all__ = [
    "IMAGE_PATTERN",
    "KNOWN_RUNTIMES",
    "MAX_POOL_SIZE",
    "QUOTA_FIELDS",
    "TYPE_NAME_PATTERN",
    "SandboxTypeInfo",
    "SandboxTypeSpec",
    "TypeList",
    "effective_quotas",
]

#: A type's name: it is a queue's name (``sbx.<type>``) and a Docker label's value.
TYPE_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
#: A Docker image reference by tag (``repo/name:tag``, with an optional registry host).
IMAGE_PATTERN = r"^[a-z0-9][a-z0-9._/:-]{0,254}$"
#: The runtimes a worker may have (``worker.runtimes.RUNTIMES``; a unit test holds them equal).
KNOWN_RUNTIMES = ("runc", "runsc")
#: The warm sandboxes of one type a node may keep.
MAX_POOL_SIZE = 64
#: The quotas a type may default and cap: every numeric field of ``Quotas``.
QUOTA_FIELDS = tuple(
    n
    for n, f in Quotas.model_fields.items()
    if n != "v" and f.annotation in (int, float, "int", "float")
)
_TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class SandboxTypeSpec(WireModel):
    """One sandbox type of the catalog.

    Attributes:
        name: the type's name, as sessions name it.
        image: the Docker image by tag (its PID 1 is the in-sandbox agent).
        digest: the image's digest (``sha256:...``): the registry digest, or the
            local image id; resolved when the type is seeded or added if not given.
        runtime: the runtime its sandboxes run under (``runc``, ``runsc``).
        network_allowed: whether a session may ask for ``quotas.network``.
        default_network: the egress policy of its sessions that give none
            (before the tenant's default; None: offline). docs/network.md.
        quotas: the quotas a session of the type gets for the fields it does not
            set (the rest are ``Quotas``' defaults); its warm pool is made with them.
        ceilings: the most a session of the type may ask per quota field, unless
            its tenant's ``type_ceilings`` say otherwise.
        pool_size: warm sandboxes per node (None: the node's ``SANDGRID_WORKER__POOL_SIZE``),
            the fewest: demand raises it (22.3, ``worker.sessions.demand``).
        pool_max: the most warm sandboxes per node demand may raise it to (None: the
            node's ``SANDGRID_WORKER__POOL_MAX``); not below ``pool_size``.
        tenant: the one tenant that may use it (a private type), or None: every tenant.
        source: ``file`` (an entry of the types file) or ``api`` (added by ``POST /v1/types``).
    """

    v: Literal[1] = 1
    name: str = Field(pattern=TYPE_NAME_PATTERN)
    image: str = Field(pattern=IMAGE_PATTERN)
    digest: str = Field("", pattern=r"^(sha256:[0-9a-f]{64})?$")
    runtime: str = Field(description="the OCI runtime: runc, or gVisor's runsc")
    network_allowed: bool = False
    default_network: NetworkPolicy | None = None
    quotas: dict[str, int | float] = Field(default_factory=dict)
    ceilings: dict[str, int | float] = Field(default_factory=dict)
    pool_size: int | None = Field(None, ge=0, le=MAX_POOL_SIZE)
    pool_max: int | None = Field(None, ge=0, le=MAX_POOL_SIZE)
    tenant: str | None = Field(None, pattern=_TENANT_PATTERN)
    source: Literal["file", "api"] = "api"

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, v: str) -> str:
        if v not in KNOWN_RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(KNOWN_RUNTIMES)}, not {v!r}")
        return v

    @field_validator("quotas", "ceilings")
    @classmethod
    def _quota_fields(cls, v: dict[str, int | float]) -> dict[str, int | float]:
        for key in v:
            if key not in QUOTA_FIELDS:
                raise ValueError(f"{key!r} is no quota; known: {', '.join(QUOTA_FIELDS)}")
        return v

    @model_validator(mode="after")
    def _coherent(self) -> SandboxTypeSpec:
        """The defaults are valid quotas and within the type's own ceilings."""
        Quotas.model_validate(self.quotas)  # raises naming the field and its bound
        defaults = Quotas.model_validate(self.quotas)
        for key, ceiling in self.ceilings.items():
            if getattr(defaults, key) > ceiling:
                raise ValueError(
                    f"quotas.{key}: the default {getattr(defaults, key)} is above the "
                    f"type's ceiling {ceiling}"
                )
        floor, most = self.pool_size, self.pool_max
        if floor is not None and most is not None and most < floor:
            raise ValueError(
                f"pool_max: {self.pool_max} is below pool_size {self.pool_size} (the floor)"
            )
        if self.default_network is not None and not self.network_allowed:
            raise ValueError("default_network: a type with network_allowed = false has none")
        return self

    def visible_to(self, tenant: str | None) -> bool:
        """Whether ``tenant`` may see and use the type (None: an operator, who sees all)."""
        return self.tenant is None or tenant is None or self.tenant == tenant


class SandboxTypeInfo(SandboxTypeSpec):
    """A type of the catalog as ``GET /v1/types`` shows it: its definition, and the live
    worker nodes that serve it now.

    A type with no node is refused (503 ``no_capacity``) until a worker serving
    it beats again.
    """

    nodes: list[str] = Field(default_factory=list, description="live nodes serving it")


class TypeList(WireModel):
    """Body of ``GET /v1/types``: the types of the catalog the caller may use."""

    types: list[SandboxTypeInfo]


def effective_quotas(kind: SandboxTypeSpec, asked: Quotas) -> Quotas:
    """A session's quotas: the fields it set, the type's defaults for the others.

    A type with no defaults returns ``asked`` itself, so the shipped types'
    sessions are exactly what they were.
    """
    if not kind.quotas:
        return asked
    given: dict[str, Any] = asked.model_dump(include=asked.model_fields_set)
    return Quotas.model_validate({**kind.quotas, **given})
