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

``limits`` holds the record (``Tenant``, ``TenantLimits``, ``check_limits``);
``store`` the tokens (``TenantStore``). Both are re-exported here.
"""

from __future__ import annotations

from scheduler.tenants.limits import (
    DEFAULT_MAX_CONCURRENT_TURNS,
    DEFAULT_MAX_SESSIONS,
    TENANT_NAME_PATTERN,
    Tenant,
    TenantLimits,
    check_limits,
)
from scheduler.tenants.store import (
    TenantChange,
    TenantStore,
    hash_token,
    load_tenants_file,
    new_token,
)

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
