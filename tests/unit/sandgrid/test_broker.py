"""The broker transport: kombu's Redis transport with one client per channel, and its
ack emulation without transactions (issue 22.1)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from sandgrid.wire import names
from sandgrid.wire.broker import Transport
from sandgrid.wire.celery_app import make_celery
from sandgrid.wire.settings import Settings
from tests.conftest import TEST_REDIS_URL
from tests.support.redis_monitor import names_of, recorded


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


def test_a_delivery_and_its_ack_take_no_transaction(redis_client: redis.Redis[str]) -> None:
    """kombu's stock QoS wrapped both pairs in MULTI/EXEC (eight commands, now four)."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue("broker-qos-test")
        queue.put({"n": 1})
        queue.put({"n": 2})
        queue.get(timeout=5).ack()  # connections up
        with recorded(TEST_REDIS_URL) as seen:
            message = queue.get(timeout=5)
            message.ack()
        queue.close()
    kinds = names_of(seen)
    assert "MULTI" not in kinds and "EXEC" not in kinds
    assert {"ZADD", "HSET", "HDEL", "ZREM"} <= set(kinds)
    assert kinds.index("HDEL") < kinds.index("ZREM")  # a cut pipeline leaves no orphan body
    assert message.payload == {"n": 2}
    assert redis_client.zcard("unacked_index") == 0 and redis_client.hlen("unacked") == 0


def test_an_unacked_message_is_still_restored(redis_client: redis.Redis[str]) -> None:
    """What the unacked record is for: a message never acked goes back to its queue."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    with app.connection_for_write() as conn:
        queue = conn.SimpleQueue("broker-restore-test")
        queue.put({"n": 1})
        queue.get(timeout=5)  # delivered, never acked
        assert redis_client.hlen("unacked") == 1
        queue.channel.qos.restore_unacked()
        queue.close()
    assert redis_client.llen("broker-restore-test") == 1
    assert redis_client.hlen("unacked") == 0 and redis_client.zcard("unacked_index") == 0


@contextmanager
def _delivered(
    redis_client: redis.Redis[str], queue: str, task: str = names.TASK_PING
) -> Iterator[tuple[Any, Any]]:
    """A connection and a channel that holds one message of ``queue`` unacked."""
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    redis_client.delete(queue)
    app.send_task(task, args=[1], queue=queue)
    with app.connection_for_write() as conn:
        channel = conn.channel()
        assert channel.basic_get(queue, no_ack=False) is not None
        yield conn, channel


def _turn_tag(channel: Any) -> Any:
    return next(iter(channel.qos._delivered))


def test_a_turn_is_held_in_memory_alone(redis_client: redis.Redis[str]) -> None:
    """A turn's delivery and ack send nothing to Redis (issue 22.1: its sender's
    watch sends it again if this process dies), and an acked turn stays acked."""
    queue = names.node_queue("broker-turn-test")
    app = make_celery(Settings(redis_url=TEST_REDIS_URL))
    redis_client.delete(queue)
    app.send_task(names.TASK_TURN, args=[{}], queue=queue)
    with app.connection_for_write() as conn:
        channel = conn.channel()
        channel.client.ping()  # connections up
        with recorded(TEST_REDIS_URL) as seen:
            message = channel.basic_get(queue, no_ack=False)
            assert redis_client.hlen("unacked") == 0
            message.ack()
        channel.close()  # nothing is put back: the turn was acked
    kinds = names_of(seen)
    assert "RPOP" in kinds and not {"ZADD", "HSET", "HDEL", "ZREM", "MULTI"} & set(kinds)
    assert message.headers["task"] == names.TASK_TURN
    assert redis_client.llen(queue) == 0 and redis_client.zcard("unacked_index") == 0


def test_a_turn_held_when_its_channel_closes_goes_back_to_its_queue(
    redis_client: redis.Redis[str],
) -> None:
    """What the record did while the process lives (a warm shutdown, a reconnect)."""
    queue = names.node_queue("broker-turn-close-test")
    with _delivered(redis_client, queue, names.TASK_TURN) as (_, channel):
        assert redis_client.hlen("unacked") == 0
        channel.close()
    back = redis_client.lrange(queue, 0, -1)
    assert len(back) == 1 and '"redelivered": true' in back[0]


def test_a_turn_rejected_with_requeue_goes_back_and_without_it_does_not(
    redis_client: redis.Redis[str],
) -> None:
    queue = names.node_queue("broker-turn-reject-test")
    with _delivered(redis_client, queue, names.TASK_TURN) as (_, channel):
        channel.qos.reject(_turn_tag(channel), requeue=True)
        assert redis_client.llen(queue) == 1
        assert channel.basic_get(queue, no_ack=False) is not None
        channel.qos.reject(_turn_tag(channel), requeue=False)
        channel.close()
    assert redis_client.llen(queue) == 0


def test_a_channel_closed_with_unacked_messages_after_its_connection_went_puts_them_back(
    redis_client: redis.Redis[str],
) -> None:
    """kombu's close restores the unacked messages through ``conn_or_acquire``;
    a client made anew there, once the connection was let go, raised an
    AttributeError that stopped a worker's consumer in a broker outage (22.5)."""
    queue = names.node_queue("broker-close-test")
    with _delivered(redis_client, queue) as (_, channel):
        channel.connection.client = None  # what kombu's Connection._close leaves behind
        channel.close()
    assert redis_client.llen(queue) == 1


def test_closing_with_unacked_messages_and_no_client_left_is_a_connection_error(
    redis_client: redis.Redis[str],
) -> None:
    """Celery ignores a connection error on close and reconnects; an AttributeError
    stopped its consumer (the Sentinel failover chaos test, 22.5)."""
    with _delivered(redis_client, names.node_queue("broker-close-test2")) as (conn, channel):
        channel._shared_client = None
        channel.connection.client = None
        with pytest.raises(tuple(conn.connection_errors)):
            channel.close()
