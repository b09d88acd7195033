"""A tenant's record and its ceilings (``TenantLimits``), checked as the API accepts them.

The ceilings are enforced where a session or a turn asks for more: a quota above
its ceiling is 422, a count above its ceiling 429 (``scheduler.turns.admission``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError, field_validator

from sandgrid.errors import InvalidInput
from sandgrid.lifecycle import MAX_FORK_COUNT
from sandgrid.models import NetworkPolicy, WireModel
from sandgrid.network import covers
from sandgrid.sandbox_types import QUOTA_FIELDS

__all__ = [
    "DEFAULT_MAX_CONCURRENT_TURNS",
    "DEFAULT_MAX_SESSIONS",
    "TENANT_NAME_PATTERN",
    "Tenant",
    "TenantLimits",
    "check_limits",
]

TENANT_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
DEFAULT_MAX_SESSIONS = 100
DEFAULT_MAX_CONCURRENT_TURNS = 32


class TenantLimits(WireModel):
    """A tenant's ceilings; requests above a quota ceiling get 422, above a count 429."""

    max_sessions: int = Field(DEFAULT_MAX_SESSIONS, ge=0, description="live sessions")
    max_concurrent_turns: int = Field(DEFAULT_MAX_CONCURRENT_TURNS, ge=1)
    max_cpus: float = Field(4.0, gt=0)
    max_memory_mb: int = Field(8192, ge=32)
    max_pids: int = Field(4096, ge=8)
    max_timeout_s: float = Field(3600.0, gt=0)
    max_workspace_mb: int = Field(4096, ge=1)
    max_output_bytes: int = Field(16 << 20, ge=1024)
    max_parallel_turns: int = Field(8, ge=1, le=16, description="a session's turns at once")
    allow_network: bool = False
    max_image_mb: int = Field(
        8192, ge=1, description="25.2: the largest image a template of the tenant may build"
    )
    max_fork_count: int = Field(
        32, ge=1, le=MAX_FORK_COUNT, description="24.2: the most sessions one fork may make"
    )
    types: list[str] | None = Field(None, description="sandbox types allowed; None: all")
    network_ceiling: list[str] = Field(
        default_factory=lambda: ["*"],
        description="what a session's network.allow may name at most (sandgrid.network.covers): "
        "'*' is any name and any public address; private ranges must be listed",
    )
    network_default: NetworkPolicy | None = Field(
        None, description="the policy of the tenant's sessions that give none (None: offline)"
    )
    type_ceilings: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="per sandbox type, quota ceilings that replace the type's own (25.1)",
    )

    @field_validator("type_ceilings")
    @classmethod
    def _type_ceilings(cls, v: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for kind, ceilings in v.items():
            for key in ceilings:
                if key not in QUOTA_FIELDS:
                    raise ValueError(f"type_ceilings.{kind}: {key!r} is no quota")
        return v

    @field_validator("network_ceiling")
    @classmethod
    def _ceiling(cls, v: list[str]) -> list[str]:
        """Each ceiling entry is what a session's allow entry may be: validated by
        ``NetworkPolicy`` itself, so the ceiling follows every rule of a policy (23.16)."""
        try:
            return NetworkPolicy(allow=v).allow
        except ValidationError as exc:
            rule = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise ValueError(rule.replace("network.allow", "network_ceiling", 1)) from None


class Tenant(WireModel):
    """A tenant as the token store holds it."""

    name: str = Field(pattern=TENANT_NAME_PATTERN)
    limits: TenantLimits = Field(default_factory=TenantLimits)


def check_limits(name: str, fields: Mapping[str, Any]) -> TenantLimits:
    """``TenantLimits`` of ``fields`` as the API would accept them: the model's rules,
    known sandbox types, and a default policy whose allow entries the ceiling
    covers (``sandgrid.network.covers``, the rule ``scheduler.network.check_policy``
    applies to every session's policy).

    Raises:
        InvalidInput: the first rule broken, with its field.
    """
    from sandgrid.wire.catalog import current

    try:
        limits = Tenant(name=name, limits=TenantLimits.model_validate(fields)).limits
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        rule = first["msg"].removeprefix("Value error, ")
        raise _refused(name, field, rule, rule if rule.startswith(field) else "") from exc
    known_types = current() if limits.types else None
    for i, kind in enumerate(limits.types or ()):
        if known_types is not None and kind not in known_types:  # a typo: every session refused
            known = ", ".join(sorted(known_types.types))
            raise _refused(name, f"types[{i}]", f"unknown sandbox type {kind!r}; known: {known}")
    allow = limits.network_default.allow if limits.network_default else []
    for i, entry in enumerate(allow):
        if not covers(limits.network_ceiling, entry):
            ceiling = limits.network_ceiling
            rule = f"{entry!r} is beyond the tenant's network ceiling {ceiling}"
            raise _refused(name, f"network_default.allow[{i}]", rule)
    return limits


def _refused(name: str, field: str, rule: str, message: str = "") -> InvalidInput:
    """The error of a limit of tenant ``name`` that breaks ``rule``."""
    return InvalidInput(
        f"tenant {name!r}: {message or f'{field}: {rule}'}",
        operation="tenants.set",
        context={"field": field, "rule": rule},
    )
