"""The result backend: Celery's Redis backend, storing a result in one round trip
of two commands (issue 22.1).

Celery's Redis backend stores a task's result with a GET of its key first (so a
lost duplicate never overwrites a success), then ``MULTI``, ``SETEX``,
``PUBLISH``, ``EXEC``: five commands per turn. Neither part guards anything on
this grid:

* a turn's task id names one attempt (``scheduler.turns.dispatch.task_id_of``)
  and a redelivered message of an attempt that ran is refused by its claim
  (``claim_turn``) before it runs; the API deletes the key as soon as it has
  read the result (``lua/finish_turn.lua``), so the GET found nothing to keep;
* the transaction only made the write and its ``PUBLISH`` atomic towards other
  clients, and no client reads the key between them: the waiter gets the value
  from the ``PUBLISH`` (or, when its subscription was down, from the key, which
  was set first on the same connection).

So ``ResultBackend`` sends ``SET ... EX`` and ``PUBLISH`` in one pipeline without a
transaction, and skips the GET.

Celery's consumer also subscribed to each task's own channel before sending it and
unsubscribed once its result came: a ``SUBSCRIBE`` and an ``UNSUBSCRIBE`` per turn.
Here a result is published to the channel of the thread that sent the task instead
(``names.reply_channel`` of the message's ``reply_to``, which Celery sets to the
sending thread's ``app.thread_oid``), and that thread's consumer (``ReplyConsumer``;
Celery keeps one result backend per thread) subscribes to it once, before its first
task is sent, and stays subscribed. A result published while the sender is between
its send and its wait waits in the subscription's socket; one published while the
subscription was down is read from its key when the consumer reconnects (every
waited task's key, after the channel is subscribed again), and by the API's own
periodic read (``scheduler.turns.dispatch``). A handle on a task another thread
sent (``AsyncResult(id)``: an idempotent retry's) hears nothing on its channel: it
reads the key when its wait starts, as Celery does. A task sent without ``reply_to``
is published on its key's channel, as before. ``make_celery`` selects it for ``redis://``
result URLs through the app loader's ``override_backends`` (the URL stays
``redis://``); any other scheme keeps Celery's own backend.
"""

from __future__ import annotations

from typing import Any

from celery.backends import redis as celery_redis
from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError
from kombu.utils.encoding import bytes_to_str

from sandgrid.wire import names

__all__ = ["RESULT_BACKEND", "ReplyConsumer", "ResultBackend", "reply_channel_of"]

#: Where Celery finds this backend (``override_backends["redis"]``).
RESULT_BACKEND = "sandgrid.wire.results:ResultBackend"


def reply_channel_of(request: Any) -> str | None:
    """The channel a task's result is published to: its sender's (``reply_to``), or
    None (its key's channel, Celery's) for a task sent without one."""
    reply_to = getattr(request, "reply_to", None)
    return names.reply_channel(str(reply_to)) if reply_to else None


class ReplyConsumer(celery_redis.ResultConsumer):  # type: ignore[misc,name-defined]  # no stubs
    """Celery's Redis result consumer on its thread's reply channel (see the module doc).

    ``cancel_for`` needs nothing of its own: a task's key is never subscribed, so
    Celery's unsubscribe of it sends nothing.
    """

    _channel: str | None = None

    def _consume_from(self, task_id: Any) -> None:
        if self._channel is None:
            self._channel = names.reply_channel(str(self.backend.app.thread_oid))
        if self._channel not in self.subscribed_to:
            self.subscribed_to.add(self._channel)
            with self.reconnect_on_error():
                self._pubsub.subscribe(self._channel)

    def _reconnect_pubsub(self) -> None:
        """Subscribe again (Celery's), then read the key of every task still waited
        for: a result published while the connection was down is not sent again."""
        base: Any = super()
        base._reconnect_pubsub()
        with self._locked():
            concrete, weak = self._pending_results
            ids = sorted({*concrete, *weak})
            if not ids:
                return
            metas = self.backend.client.mget([self._get_key_for_task(i) for i in ids])
            for meta in metas:
                if meta:
                    self.on_state_change(self._decode_result(meta), None)


class ResultBackend(RedisBackend):
    """Celery's Redis result backend with a two-command store, published to the
    sender's reply channel (see the module doc)."""

    ResultConsumer = ReplyConsumer

    def _store_result(
        self,
        task_id: Any,
        result: Any,
        state: str,
        traceback: Any = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        base: Any = self  # Celery's key-value backend: these are not in the stubs
        meta = base._get_result_meta(
            result=result, state=state, traceback=traceback, request=request
        )
        meta["task_id"] = bytes_to_str(task_id)
        value = self.encode(meta)
        if isinstance(value, str) and len(value) > base._MAX_STR_VALUE_SIZE:
            error: Any = BackendStoreError
            raise error("value too large for Redis backend", state=state, task_id=task_id)
        key, channel = self.get_key_for_task(task_id), reply_channel_of(request)
        base.ensure(self._set, (key, value, None, channel))
        return result

    def _set(self, key: Any, value: Any, expires: Any = None, channel: str | None = None) -> None:
        if expires is None:
            expires = getattr(self, "expires", None)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.set(key, value, ex=expires or None)
            pipe.publish(channel or key, value)
            pipe.execute()
