"""Tenants: tokens stored hashed, from a JSON file and from Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from sandgrid.errors import AuthError, InvalidInput, NotFound
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
    assert store.revoke("acme").tokens == 1
    with pytest.raises(AuthError):
        store.authenticate(token)


def test_tenant_names_are_key_safe(redis_client: redis.Redis[str]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TenantStore(redis_client).add("Bad:Name")


def test_update_validates_as_the_api_and_changes_nothing_when_bad(
    redis_client: redis.Redis[str],
) -> None:
    store = TenantStore(redis_client, cache_s=0)
    token = store.add("acme")
    before = redis_client.hgetall(names.tokens_key())
    bad = [
        ({"network_ceiling": ["pypi.org", "10.0.0.0/33"]}, "network_ceiling[1]"),
        ({"network_ceiling": ["pypi.org:99999"]}, "network_ceiling[0]"),
        ({"max_sessions": -1}, "max_sessions"),
        ({"max_memory_mb": "lots"}, "max_memory_mb"),
        ({"types": ["python", "pyhton"]}, "types[1]"),
        ({"network_default": {"allow": ["no spaces allowed"]}}, "network_default.allow"),
        ({"network_default": {"allow": ["10.0.0.5"]}}, "network_default.allow[0]"),
        ({"colour": "blue"}, "colour"),
    ]
    for changes, field in bad:
        with pytest.raises(InvalidInput) as caught:
            store.update("acme", changes)
        message = caught.value.message
        assert "tenant 'acme'" in message and field in message, message
        assert caught.value.context["field"].startswith(field.split("[")[0])
    assert redis_client.hgetall(names.tokens_key()) == before
    changed = store.update(
        "acme",
        {"network_ceiling": ["pypi.org:443", "10.0.0.0/8"], "max_sessions": "5"},
        clear=["types"],
    )
    assert changed.tenant.limits.network_ceiling == ["pypi.org:443", "10.0.0.0/8"]
    assert store.authenticate(token).limits.max_sessions == 5
    store.update("acme", {}, clear=["network_ceiling"])
    assert store.get("acme").limits.network_ceiling == ["*"]


def test_rotate_replaces_every_token_with_one(redis_client: redis.Redis[str]) -> None:
    store = TenantStore(redis_client, cache_s=0)
    first = store.add("acme", TenantLimits(max_sessions=9))
    second = store.add("acme", TenantLimits(max_sessions=9))
    other = store.add("globex")
    change = store.rotate("acme")
    assert change.tokens == 2 and change.token and change.token.startswith("sg_")
    for old in (first, second):
        with pytest.raises(AuthError):
            store.authenticate(old)
    assert store.authenticate(change.token).limits.max_sessions == 9
    assert store.authenticate(other).name == "globex"
    assert len(redis_client.hgetall(names.tokens_key())) == 2


def test_unknown_and_file_tenants_are_refused(
    redis_client: redis.Redis[str], tmp_path: Path
) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps([{"name": "filed", "token": "file-token"}]))
    store = TenantStore(redis_client, tenants_file=f, cache_s=0)
    for change in (store.revoke, store.rotate, lambda n: store.update(n, {"max_sessions": 1})):
        with pytest.raises(NotFound):
            change("nobody")
        with pytest.raises(InvalidInput, match="tenants file"):
            change("filed")
    assert store.get("filed").name == "filed"
    assert store.authenticate("file-token").name == "filed"
