"""The tenants' bearer tokens: ``TenantStore`` (the file and Redis, cached), the tokens'
hash, a new token, the tenants file."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandgrid.errors import AuthError, InvalidInput, NotFound
from sandgrid.wire import names
from scheduler.tenants.limits import Tenant, TenantLimits, check_limits

if TYPE_CHECKING:  # redis is imported by whoever gives a client (not by `tenants --help`)
    import redis

    from scheduler.token_watch import Refreshed

__all__ = ["TenantChange", "TenantStore", "hash_token", "load_tenants_file", "new_token"]


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


def _bare(authorization: str | None) -> str:
    """The token of a ``Bearer <token>`` header value, or the value itself."""
    token = (authorization or "").strip()
    if token.lower().startswith("bearer "):
        token = token[7:].strip()
    return token
