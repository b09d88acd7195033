"""The broker transport: kombu's Redis transport with one client per channel."""

from __future__ import annotations

import redis

from sandgrid.wire import names
from sandgrid.wire.broker import Transport
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from tests.conftest import TEST_REDIS_URL


def test_the_app_uses_it_and_still_shows_a_redis_url() -> None:
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    with app.connection_for_write() as conn:
        assert isinstance(conn.transport, Transport)
        assert conn.as_uri().startswith("redis://")  # Flower's Broker page needs the scheme


def test_a_channel_publishes_through_one_client(redis_client: redis.Redis[str]) -> None:
    """Tasks and their sent events reach Redis, and every publish of a channel
    uses the same client object (kombu's stock channel builds one per publish)."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    queue = names.node_queue("broker-test")
    with app.producer_or_acquire() as producer:
        channel = producer.channel
        for i in range(3):
            app.send_task(names.TASK_PING, args=[i], queue=queue, producer=producer)
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
    assert redis_client.llen(queue) == 3
