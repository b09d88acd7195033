"""The one Redis client factory: plain and Sentinel URLs (issue 22.5)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.sentinel import SentinelConnectionPool

from sandgrid.wire import broker, redis_connect
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.redis_connect import SentinelURL, celery_broker, parse_sentinel
from sandgrid.wire.settings import Settings

URL = "sentinel://sg-api:p%40ss@127.0.0.1:26379,127.0.0.1:26380,sentinel-c:26381/3?master=grid"


def test_a_sentinel_url_names_its_sentinels_group_db_and_user() -> None:
    assert parse_sentinel(URL) == SentinelURL(
        sentinels=(("127.0.0.1", 26379), ("127.0.0.1", 26380), ("sentinel-c", 26381)),
        master="grid",
        db=3,
        username="sg-api",
        password="p@ss",
    )


def test_defaults_are_the_sandgrid_group_db_0_and_port_26379() -> None:
    target = parse_sentinel("sentinel://10.0.0.1,10.0.0.2:26380")
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (target.master, target.db, target.username, target.password) == (
        "sandgrid",
        0,
        None,
        None,
    )
    assert target.auth() == {}


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("sentinel:///0", "no sentinel"),
        ("sentinel://h:notaport/0", "bad port"),
        ("sentinel://h:70000/0", "bad port"),
        ("sentinel://h:26379/zero", "must be a number"),
        ("sentinel://h:26379/0?mastr=x", "unknown parameter 'mastr'"),
        ("redis://h:6379/0", "not a sentinel"),
    ],
)
def test_a_bad_sentinel_url_is_refused_naming_the_rule(url: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        parse_sentinel(url)


def test_a_plain_url_gives_a_plain_client_and_stays_celerys_url() -> None:
    client = redis_connect.connect("redis://127.0.0.1:6399/2", max_connections=5)
    assert isinstance(client, redis.Redis)
    assert client.connection_pool.connection_kwargs["db"] == 2
    assert client.connection_pool.max_connections == 5
    assert celery_broker("redis://u:p@127.0.0.1:6379/0") == ("redis://u:p@127.0.0.1:6379/0", {})
    assert redis_connect.endpoints("redis://127.0.0.1:6390/0") == [("127.0.0.1", 6390)]


def test_a_sentinel_client_asks_the_sentinels_with_the_same_credentials() -> None:
    client = redis_connect.connect(URL, socket_timeout=3)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "grid"
    assert pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["username"] == "sg-api"
    assert pool.connection_kwargs["password"] == "p@ss"
    sentinel = pool.sentinel_manager.sentinels[0]
    assert sentinel.connection_pool.connection_kwargs["password"] == "p@ss"
    assert sentinel.connection_pool.connection_kwargs["socket_timeout"] == 3


def test_the_async_twin_also_follows_the_sentinels() -> None:
    client = redis_connect.connect_async(URL)
    assert isinstance(client, aioredis.Redis)
    assert type(client.connection_pool).__name__ == "SentinelConnectionPool"
    assert isinstance(redis_connect.connect_async("redis://127.0.0.1:6399/0"), aioredis.Redis)


def test_celery_gets_kombus_form_with_the_group_in_both_transport_options() -> None:
    url, options = celery_broker(URL)
    assert url == (
        "sentinel://sg-api:p%40ss@127.0.0.1:26379/3;sentinel://127.0.0.1:26380/3;"
        "sentinel://sentinel-c:26381/3"
    )
    assert options == {
        "master_name": "grid",
        "sentinel_kwargs": {"username": "sg-api", "password": "p@ss"},
    }
    app = make_celery(Settings(redis_url=URL))
    assert app.conf.broker_transport_options["master_name"] == "grid"
    assert app.conf.result_backend_transport_options["master_name"] == "grid"
    assert app.conf.broker_url.startswith("sentinel://")


def test_a_sentinel_broker_uses_the_grids_shared_client_channel() -> None:
    broker.install()
    app = make_celery(Settings(redis_url=URL))
    assert app.connection_for_write().transport_cls == "sentinel"
    assert isinstance(app.connection_for_write().transport, broker.SentinelTransport)
    assert issubclass(broker.SentinelChannel, broker.Channel)


def test_the_sentinel_endpoints_are_every_sentinel_and_no_server_when_none_answers() -> None:
    url = "sentinel://127.0.0.1:1,127.0.0.1:2/0"
    assert redis_connect.endpoints(url) == [("127.0.0.1", 1), ("127.0.0.1", 2)]
    assert redis_connect.endpoints(url, servers=True) == [("127.0.0.1", 1), ("127.0.0.1", 2)]


def test_a_connection_to_the_primary_asks_where_it_is_on_every_reconnect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """22.5: redis-py 8 reconnects inside ``send_command`` through
    ``connect_check_health``; the dropped connection must dial the primary the
    sentinels name now, not the one it had (which a failover killed)."""
    import redis.connection

    from sandgrid.wire.redis_connect import PrimaryFollowingConnection

    class Pool:
        is_master = True

        def get_master_address(self) -> tuple[str, int]:
            return ("127.0.0.1", 6390)  # the promoted replica

    dialled: list[tuple[str, int]] = []

    def dial(self: Any, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        dialled.append((self.host, self.port))

    monkeypatch.setattr(redis.connection.AbstractConnection, "connect_check_health", dial)
    conn = PrimaryFollowingConnection(connection_pool=Pool(), host="127.0.0.1", port=6389)
    conn.connect_check_health(check_health=False)
    assert dialled == [("127.0.0.1", 6390)]


def test_the_asyncio_connection_to_the_primary_asks_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import redis.asyncio.connection

    from sandgrid.wire.redis_connect import AsyncPrimaryFollowingConnection

    class Pool:
        is_master = True

        async def get_master_address(self) -> tuple[str, int]:
            return ("127.0.0.1", 6390)

    dialled: list[tuple[str, int]] = []

    async def dial(self: Any, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        dialled.append((self.host, self.port))

    monkeypatch.setattr(redis.asyncio.connection.AbstractConnection, "connect_check_health", dial)
    conn = AsyncPrimaryFollowingConnection(connection_pool=Pool(), host="127.0.0.1", port=6389)
    asyncio.run(conn.connect_check_health(check_health=False))
    assert dialled == [("127.0.0.1", 6390)]
