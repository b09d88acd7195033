"""The Celery application shared by the scheduler and the workers.

Both sides import ``app`` from here so that broker, serializer, acks and queue
names are written once. The scheduler only *sends* (``app.send_task`` with
``names.TASK_TURN``); the task body is registered by ``worker.tasks`` under the
same name. Messages and results are JSON only: a ``TurnJob`` dump in, a
``TurnOutcome`` dump out, nothing pickled.

Why these settings:
    * ``task_acks_late`` + ``task_reject_on_worker_lost``: a turn is acknowledged
      once it ran, so one still held when its worker stops or reconnects goes
      back to its queue (the turn record in Redis decides whether it may run
      again; see ``SessionRegistry.claim_turn``). A worker that dies outright
      loses its held turns with it (the broker keeps no copy of a turn:
      ``broker.QoS``); their senders' watch sends them again.
    * ``worker_prefetch_multiplier=1``: a busy worker does not hoard turns that an
      idle one could start now.
    * ``visibility_timeout`` longer than the longest turn, else Redis would hand a
      running turn to a second worker.
    * task events on, for Flower; a worker publishes its buffered events once per
      ``task_events.EVENT_FLUSH_S``, not once per event.
    * kombu's Redis transport with one client per channel instead of one per
      publish and ack (``sandgrid.wire.broker.install``).
    * Celery's Redis result backend storing a result in two commands, not five
      (``sandgrid.wire.results``).
    * ``SANDGRID_REDIS_URL=sentinel://...`` becomes kombu's and Celery's Sentinel
      form, ``master_name`` in both transport options (``redis_connect``, 22.5).
"""

from __future__ import annotations

from celery import Celery

from sandgrid.wire import broker, names, redis_connect, results, task_events
from sandgrid.wire.settings import Settings, get_settings

__all__ = ["BROKER_POOL_LIMIT", "app", "make_celery", "worker_queues"]

#: Connections to the broker that the API's sending threads may hold at once.
BROKER_POOL_LIMIT = 64


def make_celery(settings: Settings | None = None) -> Celery:
    """Build a Celery app configured for the grid.

    Args:
        settings: the process settings; ``get_settings()`` when omitted.

    Returns:
        A configured, not yet connected, Celery application.
    """
    s = settings or get_settings()
    broker.install()
    url, sentinel = redis_connect.celery_broker(s.redis_url)  # 22.5: a Sentinel URL too
    celery = Celery("sandgrid", broker=url, backend=url)
    celery.loader.override_backends = {"redis": results.RESULT_BACKEND}  # redis:// only
    celery.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": s.visibility_timeout_s, **sentinel},
        result_backend_transport_options=dict(sentinel),
        broker_connection_retry_on_startup=True,
        broker_pool_limit=BROKER_POOL_LIMIT,
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_consumer=task_events.CONSUMER,
        result_expires=s.result_expires_s,
        task_create_missing_queues=True,
        task_default_queue=names.type_queue("python"),
        task_track_started=False,
        enable_utc=True,
        timezone="UTC",
    )
    return celery


def worker_queues(types: list[str], node: str) -> list[str]:
    """The queues a worker node consumes: its direct queue first, then shared ones.

    Args:
        types: the sandbox types the node serves (``python``...).
        node: the node's name, unique in the grid.
    """
    queues = [names.node_queue(node)]
    queues += [names.type_queue(t) for t in types]
    queues += [names.batch_queue(t) for t in types]
    return queues


app: Celery = make_celery()
