"""Tenants and their bearer tokens.

A token is never stored: only its sha256, mapped to the tenant record. Tokens
come from two places, merged (Redis wins on a clash):

* a JSON file (``SANDGRID_TENANTS_FILE``), for static deployments::

      {"tenants": [
        {"name": "acme", "token_sha256": "<hex>", "limits": {"max_sessions": 50}},
        {"name": "dev", "token": "plain-token-hashed-on-load"}
      ]}

* the Redis hash ``names.tokens_key()`` (sha256 -> tenant JSON), written by
  ``sandgrid tenants add NAME``, which prints the new token once, and changed by
  ``sandgrid tenants set|rotate|revoke NAME`` (``update``, ``rotate``, ``revoke``).

Lookups are cached for ``settings.auth_cache_s`` so that a turn costs no extra
round trip for its token. A change of Redis tokens is announced to every API
process (``scheduler.token_watch``), which drops its cache at once: a rotated or
revoked token is refused by the next request. A file tenant is changed in its
file (read when the API starts): ``update``, ``rotate`` and ``revoke`` refuse it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, field_validator

from sandgrid.errors import AuthError, InvalidInput, NotFound
from sandgrid.lifecycle import MAX_FORK_COUNT
from sandgrid.models import NetworkPolicy, WireModel
from sandgrid.network import covers
from sandgrid.sandbox_types import QUOTA_FIELDS
from sandgrid.wire import names

if TYPE_CHECKING:  # redis is imported by whoever gives a client (not by `tenants --help`)
    import redis

    from scheduler.token_watch import Refreshed

__all__ = [
    "DEFAULT_MAX_CONCURRENT_TURNS",
    "DEFAULT_MAX_SESSIONS",
    "TENANT_NAME_PATTERN",
    "Tenant",
    "TenantChange",
    "TenantLimits",
    "TenantStore",
    "check_limits",
    "hash_token",
    "load_tenants_file",
    "new_token",
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


def hash_token(token: str) -> str:
    """The sha256 hex digest under which a token is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A new bearer token: 32 random bytes, URL-safe."""
    return "sg_" + secrets.token_urlsafe(32)


def load_tenants_file(path: Path) -> dict[str, Tenant]:
    """Read a tenants JSON file into ``{sha256: Tenant}``.

    Raises:
        InvalidInput: the file is not valid JSON or an entry has no token.
    """
    try:
        raw: Any = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"tenants file {path}: {exc}", operation="tenants.load") from exc
    entries = raw.get("tenants", []) if isinstance(raw, dict) else raw
    out: dict[str, Tenant] = {}
    for entry in entries:
        entry = dict(entry)
        digest = entry.pop("token_sha256", None)
        token = entry.pop("token", None)
        if not digest and not token:
            raise InvalidInput(
                f"tenants file {path}: tenant {entry.get('name')!r} has no token or token_sha256",
                operation="tenants.load",
            )
        out[str(digest or hash_token(str(token)))] = Tenant.model_validate(entry)
    return out


@dataclass(frozen=True)
class TenantChange:
    """What ``update``, ``rotate`` or ``revoke`` did."""

    tenant: Tenant
    #: Token records changed (a tenant may hold several tokens).
    tokens: int
    #: The API processes that dropped their token cache (``scheduler.token_watch``).
    refreshed: Refreshed
    #: ``rotate``: the new token, shown only here.
    token: str | None = None


class TenantStore:
    """Token -> tenant, from the file and Redis, with a short in-process cache.

    Args:
        client: a Redis client with ``decode_responses=True``.
        tenants_file: the optional JSON file.
        cache_s: how long a lookup (hit or miss) is trusted.
    """

    def __init__(
        self, client: redis.Redis[str], *, tenants_file: Path | None = None, cache_s: float = 5.0
    ) -> None:
        self.redis = client
        self.cache_s = cache_s
        self.tenants_file = tenants_file
        self._static = load_tenants_file(tenants_file) if tenants_file else {}
        self._cache: dict[str, tuple[float, Tenant | None]] = {}
        #: Bumped by ``forget``: a lookup begun before it keeps its answer out of the cache.
        self._generation = 0

    def authenticate(self, authorization: str | None) -> Tenant:
        """The tenant of a ``Bearer <token>`` header value (or a bare token).

        Raises:
            AuthError: no token, or a token that no tenant holds.
        """
        token = _bare(authorization)
        if not token:
            raise AuthError("missing bearer token", operation="auth")
        tenant = self.lookup(hash_token(token))
        if tenant is None:
            raise AuthError("unknown bearer token", operation="auth")
        return tenant

    def from_cache(self, authorization: str | None) -> Tenant | None:
        """The tenant if this token was found within ``cache_s``; no I/O, no errors."""
        token = _bare(authorization)
        hit = self._cache.get(hash_token(token)) if token else None
        return hit[1] if hit is not None and hit[0] > time.monotonic() else None

    def lookup(self, digest: str) -> Tenant | None:
        """The tenant holding the token whose sha256 is ``digest``."""
        now, generation = time.monotonic(), self._generation
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        raw = self.redis.hget(names.tokens_key(), digest)
        tenant = Tenant.model_validate_json(raw) if raw else self._static.get(digest)
        if len(self._cache) > 10_000:
            self._cache.clear()
        if generation == self._generation:  # no change announced since the read began
            self._cache[digest] = (now + self.cache_s, tenant)
        return tenant

    def forget(self) -> None:
        """Drop every cached lookup (tokens changed, here or in another process)."""
        self._generation += 1
        self._cache.clear()

    def add(self, name: str, limits: TenantLimits | None = None) -> str:
        """Register a new token for tenant ``name`` in Redis; return the token.

        The token is shown only here: the store keeps its hash.
        """
        tenant = Tenant(name=name, limits=limits or TenantLimits())
        token = new_token()
        self.redis.hset(names.tokens_key(), hash_token(token), tenant.model_dump_json())
        return token

    def get(self, name: str) -> Tenant:
        """Tenant ``name`` (its first Redis record, else its file entry).

        Raises:
            NotFound: no token of that tenant.
        """
        found = self._records(self.redis.hgetall(names.tokens_key()), name)
        tenant = next(iter(found.values()), None) or self._filed(name)
        if tenant is None:
            raise NotFound(f"tenant {name!r}: no such tenant", operation="tenants")
        return tenant

    def update(
        self, name: str, changes: Mapping[str, Any], clear: Iterable[str] = ()
    ) -> TenantChange:
        """Set limits of every Redis token of ``name``; ``clear`` puts fields back to their
        defaults. Validated as the API validates (the model, and the default network
        policy within the ceiling); nothing is written unless every record is valid.

        Raises:
            InvalidInput: a value breaks a rule (the field and the rule named).
            NotFound: no Redis token of that tenant.
        """
        cleared = set(clear)
        unknown = sorted(cleared.union(changes) - set(TenantLimits.model_fields) - {"v"})
        if unknown:
            known = ", ".join(f for f in TenantLimits.model_fields if f != "v")
            raise InvalidInput(
                f"tenant {name!r}: unknown limit {unknown[0]!r} (limits: {known})",
                operation="tenants.set",
                context={"field": unknown[0], "rule": "a field of TenantLimits"},
            )

        def limits(old: Tenant) -> Tenant:
            merged = {k: v for k, v in old.limits.model_dump().items() if k not in cleared}
            return Tenant(name=name, limits=check_limits(name, {**merged, **changes}))

        return self._rewrite(name, lambda digest, old: {digest: limits(old)}, "tenants.set")

    def rotate(self, name: str) -> TenantChange:
        """Replace every Redis token of ``name`` with one new token (returned once); the
        old ones are refused at once, by every API process.

        Raises:
            NotFound: no Redis token of that tenant.
        """
        token = new_token()
        change = self._rewrite(
            name, lambda digest, old: {hash_token(token): old}, "tenants.rotate", one=True
        )
        return TenantChange(change.tenant, change.tokens, change.refreshed, token)

    def revoke(self, name: str) -> TenantChange:
        """Remove every Redis token of ``name``; refused at once, by every API process.

        Raises:
            NotFound: no Redis token of that tenant.
        """
        return self._rewrite(name, lambda digest, old: {}, "tenants.revoke")

    def _rewrite(
        self,
        name: str,
        replace: Callable[[str, Tenant], dict[str, Tenant]],
        operation: str,
        *,
        one: bool = False,
    ) -> TenantChange:
        """Replace each Redis record of ``name`` by what ``replace`` makes of it (only the
        first one when ``one``), in one transaction; then announce the change."""
        if self._filed(name) is not None:
            raise InvalidInput(
                f"tenant {name!r} has a token in the tenants file {self.tenants_file}: change "
                "it there (the API reads the file when it starts)",
                operation=operation,
            )
        key = names.tokens_key()
        done: dict[str, Any] = {}

        def transaction(pipe: Any) -> None:
            old = self._records(pipe.hgetall(key), name)
            if not old:
                raise NotFound(f"tenant {name!r}: no such tenant in Redis", operation=operation)
            new: dict[str, Tenant] = {}
            for i, (digest, tenant) in enumerate(old.items()):
                new.update(replace(digest, tenant) if i == 0 or not one else {})
            pipe.multi()
            if gone := [d for d in old if d not in new]:
                pipe.hdel(key, *gone)
            if new:
                pipe.hset(key, mapping={d: t.model_dump_json() for d, t in new.items()})
            done.update(old=old, new=new)

        from scheduler.token_watch import announce  # it imports redis

        self.redis.transaction(transaction, key)  # type: ignore[no-untyped-call]  # types-redis
        self.forget()
        refreshed = announce(self.redis)
        tenant = next(iter(done["new"].values()), next(iter(done["old"].values())))
        return TenantChange(tenant, len(done["old"]), refreshed)

    @staticmethod
    def _records(found: Mapping[str, str], name: str) -> dict[str, Tenant]:
        """The Redis records of tenant ``name`` among ``found`` (sha256 -> tenant JSON)."""
        every = {d: Tenant.model_validate_json(raw) for d, raw in found.items()}
        return {d: t for d, t in every.items() if t.name == name}

    def _filed(self, name: str) -> Tenant | None:
        return next((t for t in self._static.values() if t.name == name), None)

    def tenants(self) -> list[Tenant]:
        """Every known tenant, once each (file and Redis)."""
        found = self.redis.hgetall(names.tokens_key())
        every = [*self._static.values(), *(Tenant.model_validate_json(r) for r in found.values())]
        return sorted({t.name: t for t in every}.values(), key=lambda t: t.name)


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


def _bare(authorization: str | None) -> str:
    """The token of a ``Bearer <token>`` header value, or the value itself."""
    token = (authorization or "").strip()
    if token.lower().startswith("bearer "):
        token = token[7:].strip()
    return token
