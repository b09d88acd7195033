"""Tenants: tokens stored hashed, from a JSON file and from Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from sandgrid.errors import AuthError, InvalidInput
from sandgrid.wire import names
from scheduler.tenants import TenantLimits, TenantStore, hash_token, load_tenants_file


def test_file_accepts_plain_and_hashed_tokens(tmp_path: Path) -> None:
    f = tmp_path / "tenants.json"
    f.write_text(
        json.dumps(
            {
                "tenants": [
                    {"name": "acme", "token": "plain", "limits": {"max_sessions": 3}},
                    {"name": "globex", "token_sha256": hash_token("other")},
                ]
            }
        )
    )
    found = load_tenants_file(f)
    assert found[hash_token("plain")].limits.max_sessions == 3
    assert found[hash_token("other")].name == "globex"


def test_file_errors_are_readable(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text('[{"name": "x"}]')
    with pytest.raises(InvalidInput, match="no token"):
        load_tenants_file(f)
    f.write_text("{")
    with pytest.raises(InvalidInput, match=r"t\.json"):
        load_tenants_file(f)


def test_store_add_and_authenticate(redis_client: redis.Redis[str], tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps([{"name": "filed", "token": "file-token"}]))
    store = TenantStore(redis_client, tenants_file=f, cache_s=60)
    token = store.add("acme", TenantLimits(max_sessions=7))
    assert token not in json.dumps(redis_client.hgetall(names.tokens_key()))
    assert store.authenticate(f"Bearer {token}").limits.max_sessions == 7
    assert store.from_cache(f"Bearer {token}") is not None
    assert store.authenticate("file-token").name == "filed"
    for bad in (None, "", "Bearer ", "Bearer nope"):
        with pytest.raises(AuthError):
            store.authenticate(bad)
    assert [t.name for t in store.tenants()] == ["acme", "filed"]
    assert store.revoke("acme") == 1
    with pytest.raises(AuthError):
        store.authenticate(token)


def test_tenant_names_are_key_safe(redis_client: redis.Redis[str]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TenantStore(redis_client).add("Bad:Name")
