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
transaction, and skips the GET. ``make_celery`` selects it for ``redis://``
result URLs through the app loader's ``override_backends`` (the URL stays
``redis://``); any other scheme keeps Celery's own backend.
"""

from __future__ import annotations

from typing import Any

from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError
from kombu.utils.encoding import bytes_to_str

__all__ = ["RESULT_BACKEND", "ResultBackend"]

#: Where Celery finds this backend (``override_backends["redis"]``).
RESULT_BACKEND = "sandgrid.wire.results:ResultBackend"


class ResultBackend(RedisBackend):
    """Celery's Redis result backend with a two-command store (see the module doc)."""

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
        try:
            base._set_with_state(self.get_key_for_task(task_id), self.encode(meta), state)
        except BackendStoreError as ex:
            error: Any = BackendStoreError
            raise error(str(ex), state=state, task_id=task_id) from ex
        return result

    def _set(self, key: Any, value: Any, expires: Any = None) -> None:
        if expires is None:
            expires = getattr(self, "expires", None)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.set(key, value, ex=expires or None)
            pipe.publish(key, value)
            pipe.execute()
