"""Sending a turn to the workers and waiting for its outcome.

``Dispatcher`` is the seam between the API and Celery: the API's turn flow
(``scheduler.turns.runner``) only calls ``send`` and ``wait``, so unit tests plug in a
fake worker and the lead can swap the transport without touching the flow.

``CeleryDispatcher`` sends with ``app.send_task(names.TASK_TURN, ...)`` and waits
on the Redis result backend's pub/sub consumer (``AsyncResult.get``): the
outcome arrives as soon as the worker stores it, without polling, and a wait
with no outcome returns after its timeout (``_DeadlineDrainer``), not after
Celery's 1 s drain slice. Celery keeps one result backend per thread, so each API thread sends
and waits on its own consumer; ``send`` and ``wait`` of a turn must run on the
same thread (the API's sync handlers do).

Redis unreachable, as the broker on ``send`` or as the result backend on
``wait``, is 503 ``registry_unavailable``; on ``send`` its context says
``turn_sent: false`` (no worker can run that turn), unless the task message had
gone out before the failure (Celery's ``after_task_publish``): then
``turn_sent: true`` and nothing about running.

``handle_of`` gives a handle on a turn that another request sent: a retried exec
with the same idempotency key waits for the outcome of the first one's turn
instead of sending it again (``scheduler.turns.idempotency``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis.exceptions
from celery import Celery
from celery.backends.asynchronous import Drainer
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult
from celery.signals import after_task_publish
from kombu.exceptions import OperationalError
from pydantic import ValidationError

from sandgrid.errors import ErrorCode, SandboxError, SandgridError, unavailable
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.turns import sent_events
from scheduler.turns.task_repr import describe

__all__ = [
    "DRAIN_INTERVAL_S",
    "RESULT_RETRY_POLICY",
    "STORED_CHECK_S",
    "CeleryDispatcher",
    "Dispatcher",
    "outcome_from_result",
    "result_key",
    "task_id_of",
]

#: What the broker and result clients raise when Redis cannot be reached.
_BROKER_DOWN: tuple[type[Exception], ...] = (
    OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
_RESULTS_DOWN: tuple[type[Exception], ...] = (*_BROKER_DOWN, OSError)
_SEND_ERRORS: tuple[type[Exception], ...] = (*_BROKER_DOWN, RuntimeError)
_WAIT_ERRORS: tuple[type[Exception], ...] = (*_RESULTS_DOWN, RuntimeError)

#: How the API's result consumer reconnects when Redis goes away: about 4.5 s of
#: tries, enough to ride over a restart; past that a request answers 503
#: ``registry_unavailable`` instead of blocking for Celery's default 20 s. (Workers
#: keep the default: their results must outlast a longer outage.)
RESULT_RETRY_POLICY = {
    "max_retries": 6,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}

#: How often ``AsyncResult.get`` drains the result consumer (s).
DRAIN_INTERVAL_S = 0.001


class _DeadlineDrainer(Drainer):
    """Celery's default result drainer, never waiting past the caller's timeout.

    Celery 5.7 drains the result consumer in slices of 1 s whatever timeout
    ``AsyncResult.get`` was given (it does not pass ``interval`` down), so a
    0.25 s wait took 1 s: the API checked a turn's worker once a second instead
    of every ``lost_check_s``, and a dead worker's turn was sent again up to 2 s
    late. An outcome still wakes the wait at once (pub/sub); only the timeout
    was coarse.
    """

    def drain_events_until(
        self,
        p: Callable[[], bool],
        timeout: float | None = None,
        interval: float = 1,
        on_interval: Callable[[], None] | None = None,
        wait: Callable[[float], None] | None = None,
    ) -> Any:  # a generator (the stubs say None)
        if timeout is not None:
            interval = min(interval, max(timeout, DRAIN_INTERVAL_S))
        base: Any = super()
        return base.drain_events_until(
            p, timeout=timeout, interval=interval, on_interval=on_interval, wait=wait
        )


def _bound_drainer(handle: AsyncResult[Any]) -> None:
    """Give this thread's result consumer the deadline drainer and the subscribed
    handles' skipped read (``_skip_read``), once."""
    consumer = getattr(handle.backend, "result_consumer", None)
    if consumer is not None and type(consumer.drainer) is Drainer:
        consumer.drainer = _DeadlineDrainer(consumer)
    if hasattr(consumer, "on_wait_for_pending") and not getattr(
        consumer, "_sandgrid_skip_read", False
    ):
        _skip_read(consumer)


def _skip_read(consumer: Any) -> None:
    """No GET of the result key when a wait starts on a handle that ``send``
    subscribed to before it published the task.

    Celery's Redis consumer reads the result key at the start of every
    ``AsyncResult.get`` (``on_wait_for_pending``), for a result stored before its
    SUBSCRIBE. ``send_task`` subscribes first (``on_task_call``), so for the turns
    this process sent the read only costs a round trip per wait; a result
    published while the subscription was down is read by ``_stored``. Handles
    of turns sent elsewhere (``handle_of``) keep the read.
    """
    read = consumer.on_wait_for_pending

    def on_wait_for_pending(result: Any, **kwargs: Any) -> Any:
        if getattr(result, "_sandgrid_subscribed", False):
            return None
        return read(result, **kwargs)

    consumer.on_wait_for_pending = on_wait_for_pending
    consumer._sandgrid_skip_read = True


#: How often a waiting turn reads its result key itself (s): see ``_stored``.
STORED_CHECK_S = 3.0


def _stored(handle: AsyncResult[Any]) -> TurnOutcome | None:
    """A result the pub/sub consumer missed, read from its key.

    A result published while the consumer's connection was down (a Redis
    restart) is not delivered again; Celery re-reads the keys when it notices
    the broken connection, but not when the worker published after Redis came
    back on a connection the consumer had not yet found broken. So a wait with
    no outcome reads the key itself, at most every ``STORED_CHECK_S``.
    """
    now = time.monotonic()
    last: float | None = getattr(handle, "_sandgrid_read_at", None)
    if last is not None and now - last < STORED_CHECK_S:
        return None
    handle._sandgrid_read_at = now  # type: ignore[attr-defined]
    if last is None:
        return None  # the first timeout: the consumer had its chance
    try:
        meta = handle.backend.get_task_meta(handle.id)
    except _WAIT_ERRORS:
        return None  # Redis still away: the next poll's wait says so
    if meta.get("status") != "SUCCESS":
        return None
    return outcome_from_result(handle, meta.get("result"))


def task_id_of(job: TurnJob) -> str:
    """The Celery task id of a turn attempt: readable in Flower, unique per attempt."""
    return f"{job.turn_id}.{job.attempt}"


class Dispatcher(Protocol):
    """Sends turns and waits for outcomes."""

    def send(self, job: TurnJob, queue: str, *, expires: float) -> Any:
        """Queue ``job`` on ``queue``; a worker must not start it after ``expires`` s.

        Returns:
            A handle for ``wait`` and ``forget``.
        """
        ...

    def wait(self, handle: Any, timeout: float) -> TurnOutcome | None:
        """The outcome, or None if none came within ``timeout`` seconds."""
        ...

    def forget(self, handle: Any) -> None:
        """Stop waiting for ``handle`` and drop its stored result, if any."""
        ...

    def handle_of(self, job: TurnJob) -> Any:
        """A handle on ``job``, sent before (maybe by another process), for ``wait``."""
        ...


class CeleryDispatcher:
    """The production dispatcher over a Celery app (see ``sandgrid.wire.celery_app``)."""

    def __init__(self, app: Celery, *, drain_interval_s: float = DRAIN_INTERVAL_S) -> None:
        self.app = app
        options = dict(app.conf.result_backend_transport_options or {})
        options.setdefault("retry_policy", RESULT_RETRY_POLICY)
        app.conf.result_backend_transport_options = options
        if app.conf.task_send_sent_event:
            sent_events.install(app)  # one PUBLISH per window, not per turn (22.1)
        #: How often a waiting thread drains the result consumer. Batch runners wait
        #: with a coarser interval: dozens of threads polling at 1 kHz would take
        #: the CPU (and the GIL) from interactive turns.
        self.drain_interval_s = drain_interval_s

    def send(self, job: TurnJob, queue: str, *, expires: float) -> AsyncResult[Any]:
        _published.task_id = None
        try:
            result: AsyncResult[Any] = self.app.send_task(
                names.TASK_TURN,
                args=[job.model_dump(mode="json")],
                queue=queue,
                task_id=task_id_of(job),
                expires=expires,
                argsrepr=describe(job),  # Flower and logs: a summary, never contents
                kwargsrepr="{}",
            )
            result._sandgrid_subscribed = True  # type: ignore[attr-defined]  # _skip_read
        except _SEND_ERRORS as exc:
            if not _registry_down(exc):
                raise
            if _published.task_id == task_id_of(job):
                raise _sent_unanswered(job, exc) from exc
            raise unavailable(
                ErrorCode.REGISTRY_UNAVAILABLE,
                f"the broker (Redis) is unavailable: {type(exc).__name__}: {exc}; the turn "
                "was not sent and did not run",
                operation="turn.send",
                context={"turn": job.turn_id, "turn_sent": False, "ran": False},
            ) from exc
        return result

    def wait(self, handle: AsyncResult[Any], timeout: float) -> TurnOutcome | None:
        _bound_drainer(handle)
        try:
            value = handle.get(timeout=timeout, interval=self.drain_interval_s, propagate=False)
        except CeleryTimeout:
            return _stored(handle)
        except _WAIT_ERRORS as exc:
            if not _registry_down(exc):
                raise
            raise unavailable(
                ErrorCode.REGISTRY_UNAVAILABLE,
                f"the result backend (Redis) is unavailable while waiting for turn "
                f"{handle.id}: {type(exc).__name__}: {exc}; retry with the same "
                "Idempotency-Key for its outcome",
                operation="turn.wait",
                context={"task_id": str(handle.id)},
            ) from exc
        return outcome_from_result(handle, value)

    def handle_of(self, job: TurnJob) -> AsyncResult[Any]:
        result: AsyncResult[Any] = self.app.AsyncResult(task_id_of(job))
        return result

    def forget(self, handle: AsyncResult[Any]) -> None:
        # Best effort: the result expires anyway (result_expires).
        with contextlib.suppress(Exception):
            handle.forget()


def result_key(dispatcher: Dispatcher, handle: Any, client: Any) -> str | None:
    """The Redis key of ``handle``'s stored result when ``client`` (the registry's)
    reaches the same database as the result backend, so the turn's end can delete
    it in its own round trip (``SessionRegistry.finish_turn``) instead of ``forget``;
    None otherwise (another dispatcher, another database: ``forget`` it)."""
    if not isinstance(dispatcher, CeleryDispatcher):
        return None
    backend = handle.backend
    params = getattr(backend, "connparams", None) or {}
    ours = client.connection_pool.connection_kwargs
    if any(params.get(k) != ours.get(k) for k in ("host", "port", "path", "db")) or not params:
        return None
    key = backend.get_key_for_task(handle.id)
    return key.decode() if isinstance(key, bytes) else str(key)


class _Published(threading.local):
    """The task id this thread's last task message went out with (22.5)."""

    task_id: str | None = None


_published = _Published()


@after_task_publish.connect(weak=False)
def _mark_published(headers: dict[str, Any] | None = None, **_: Any) -> None:
    _published.task_id = (headers or {}).get("id")


def _sent_unanswered(job: TurnJob, exc: BaseException) -> SandgridError:
    """The broker failed after the task message went out (its ``task-sent`` event,
    published next, did not): a worker may run the turn, so the error must not
    say it did not run, and its idempotency key must be kept for a retry to wait
    on (found by the Sentinel failover chaos test, 22.5: the key was released,
    the retry answered ``session_busy`` while the first copy ran)."""
    return unavailable(
        ErrorCode.REGISTRY_UNAVAILABLE,
        f"the broker (Redis) failed after turn {job.turn_id} was sent: "
        f"{type(exc).__name__}: {exc}; it may run: retry with the same "
        "Idempotency-Key for its outcome",
        operation="turn.send",
        context={"turn": job.turn_id, "turn_sent": True},
    )


def _registry_down(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis is unreachable: a client's connection error, or
    Celery's result consumer giving up its reconnection (a ``RuntimeError`` caused
    by one)."""
    if isinstance(exc, RuntimeError):
        return isinstance(exc.__cause__, _RESULTS_DOWN)
    return True


def outcome_from_result(handle: AsyncResult[Any], value: Any) -> TurnOutcome:
    """Map what the task returned (or raised) to a ``TurnOutcome``.

    The worker's task returns a ``TurnOutcome`` dump: this is where its result is
    validated, once (``TurnResult``, by its ``kind``), to travel typed from here.
    Anything else, or an outcome that does not fit, means the task itself failed
    (a bug or a crash in the worker glue, a worker of another version), reported
    as a sandbox error.
    """
    turn_id = str(handle.id).rsplit(".", 1)[0]
    if isinstance(value, dict) and "ok" in value:
        try:
            return TurnOutcome.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            err: SandgridError = SandboxError(
                f"the worker returned a malformed outcome: {where}: {first['msg']}",
                operation="turn",
                context={"task_id": str(handle.id)},
            )
    elif isinstance(value, BaseException):
        err = SandboxError(
            f"the worker's task failed: {type(value).__name__}: {value}",
            operation="turn",
            context={"task_id": str(handle.id), "state": str(handle.state)},
        )
    else:
        err = SandboxError(
            f"the worker returned an unexpected result of type {type(value).__name__}",
            operation="turn",
            context={"task_id": str(handle.id)},
        )
    return TurnOutcome(turn_id=turn_id, node="", ok=False, error=err.to_body())
