"""23.16: a token change reaches another process's token cache at once (real Redis).

The "API process" here is a ``TenantStore`` with a long cache and its ``TokenWatch``,
as ``scheduler.api.app`` wires them; the operator is another store on another
client, as ``sandgrid tenants`` is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from sandgrid.errors import AuthError
from scheduler.tenants import TenantStore
from scheduler.token_watch import TokenWatch, announce, changes_channel
from tests.conftest import TEST_REDIS_URL


@pytest.fixture
def api_store(redis_client: redis.Redis[str]) -> Iterator[TenantStore]:
    """The API's store: lookups cached for an hour, dropped by its watch."""
    client: redis.Redis[str] = redis.Redis.from_url(TEST_REDIS_URL, decode_responses=True)
    store = TenantStore(client, cache_s=3600)
    watch = TokenWatch(client, store.forget)
    watch.start()
    yield store
    watch.stop()
    client.close()


@pytest.fixture
def operator(redis_client: redis.Redis[str]) -> TenantStore:
    """``sandgrid tenants``' store: another client, as another process has."""
    return TenantStore(redis_client)


@pytest.fixture
def token(api_store: TenantStore, operator: TenantStore) -> str:
    """A token of acme, which the API has just seen (so cached for an hour)."""
    token = operator.add("acme")
    assert api_store.authenticate(f"Bearer {token}").name == "acme"
    assert api_store.from_cache(token) is not None  # the next request costs no round trip
    return token


def test_rotate_is_refused_at_once_by_a_warm_cache(
    api_store: TenantStore, operator: TenantStore, token: str
) -> None:
    change = operator.rotate("acme")
    assert change.refreshed.listeners == 1 and change.refreshed.complete
    assert api_store.from_cache(token) is None
    with pytest.raises(AuthError):
        api_store.authenticate(token)
    assert change.token is not None and api_store.authenticate(change.token).name == "acme"


def test_revoke_is_refused_at_once_by_a_warm_cache(
    api_store: TenantStore, operator: TenantStore, token: str
) -> None:
    assert operator.revoke("acme").tokens == 1
    with pytest.raises(AuthError):
        api_store.authenticate(token)


def test_set_limits_reach_a_warm_cache(
    api_store: TenantStore, operator: TenantStore, token: str
) -> None:
    operator.update("acme", {"max_sessions": 3})
    assert api_store.authenticate(token).limits.max_sessions == 3


def test_a_lookup_begun_before_a_change_is_not_cached(redis_client: redis.Redis[str]) -> None:
    """The race: a lookup reads the old record, the change drops the cache, then the
    lookup would store the old record for ``cache_s``: the generation keeps it out."""
    store = TenantStore(redis_client, cache_s=3600)
    token = store.add("acme")
    real_hget = redis_client.hget

    def hget_then_change(*args: str) -> str | None:
        raw = real_hget(*args)
        store.forget()  # the watch ran while the lookup was reading
        return raw

    redis_client.hget = hget_then_change  # type: ignore[method-assign]
    try:
        store.authenticate(token)
    finally:
        redis_client.hget = real_hget  # type: ignore[method-assign]
    assert store.from_cache(token) is None


def test_announce_without_listeners_and_per_database(redis_client: redis.Redis[str]) -> None:
    other = redis.Redis.from_url("redis://127.0.0.1:6379/0", decode_responses=True)
    assert changes_channel(redis_client) != changes_channel(other)  # grids sharing a server
    other.close()
    nobody = announce(redis_client, wait_s=0.2)
    assert nobody.listeners == 0 and nobody.complete


def test_watch_starts_and_stops_without_redis() -> None:
    dead: redis.Redis[str] = redis.Redis.from_url("redis://127.0.0.1:1/0", decode_responses=True)
    dropped: list[int] = []
    watch = TokenWatch(dead, lambda: dropped.append(1))
    watch.start(wait_s=2.0)
    watch.stop()
    assert watch._thread is not None and not watch._thread.is_alive()
    assert not dropped
