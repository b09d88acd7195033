"""Tenants and their bearer tokens.

A token is never stored: only its sha256, mapped to the tenant record. Tokens
come from two places, merged (Redis wins on a clash):

* a JSON file (``SANDGRID_TENANTS_FILE``), for static deployments::

      {"tenants": [
        {"name": "acme", "token_sha256": "<hex>", "limits": {"max_sessions": 50}},
        {"name": "dev", "token": "plain-token-hashed-on-load"}
      ]}

* the Redis hash ``names.tokens_key()`` (sha256 -> tenant JSON), written by
  ``sandgrid tenants add NAME``, which prints the new token once.

Lookups are cached for ``settings.auth_cache_s`` so that a turn costs no extra
round trip for its token.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from pathlib import Path
from typing import Any

import redis
from pydantic import Field

from sandgrid.errors import AuthError, InvalidInput
from sandgrid.models import NetworkPolicy, WireModel
from sandgrid.wire import names

__all__ = [
    "DEFAULT_MAX_CONCURRENT_TURNS",
    "DEFAULT_MAX_SESSIONS",
    "TENANT_NAME_PATTERN",
    "Tenant",
    "TenantLimits",
    "TenantStore",
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
    types: list[str] | None = Field(None, description="sandbox types allowed; None: all")
    network_ceiling: list[str] = Field(
        default_factory=lambda: ["*"],
        description="what a session's network.allow may name at most (sandgrid.network.covers): "
        "'*' is any name and any public address; private ranges must be listed",
    )
    network_default: NetworkPolicy | None = Field(
        None, description="the policy of the tenant's sessions that give none (None: offline)"
    )


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
        self._static = load_tenants_file(tenants_file) if tenants_file else {}
        self._cache: dict[str, tuple[float, Tenant | None]] = {}

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
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        raw = self.redis.hget(names.tokens_key(), digest)
        tenant = Tenant.model_validate_json(raw) if raw else self._static.get(digest)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now + self.cache_s, tenant)
        return tenant

    def add(self, name: str, limits: TenantLimits | None = None) -> str:
        """Register a new token for tenant ``name`` in Redis; return the token.

        The token is shown only here: the store keeps its hash.
        """
        tenant = Tenant(name=name, limits=limits or TenantLimits())
        token = new_token()
        self.redis.hset(names.tokens_key(), hash_token(token), tenant.model_dump_json())
        return token

    def revoke(self, name: str) -> int:
        """Remove every Redis token of tenant ``name``; return how many."""
        found = self.redis.hgetall(names.tokens_key())
        gone = [d for d, raw in found.items() if Tenant.model_validate_json(raw).name == name]
        if gone:
            self.redis.hdel(names.tokens_key(), *gone)
        self._cache.clear()
        return len(gone)

    def tenants(self) -> list[Tenant]:
        """Every known tenant, once each (file and Redis)."""
        found = self.redis.hgetall(names.tokens_key())
        every = [*self._static.values(), *(Tenant.model_validate_json(r) for r in found.values())]
        return sorted({t.name: t for t in every}.values(), key=lambda t: t.name)


def _bare(authorization: str | None) -> str:
    """The token of a ``Bearer <token>`` header value, or the value itself."""
    token = (authorization or "").strip()
    if token.lower().startswith("bearer "):
        token = token[7:].strip()
    return token
