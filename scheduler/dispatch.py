"""Sending a turn to the workers and waiting for its outcome.

``Dispatcher`` is the seam between the API and Celery: the API's turn flow
(``scheduler.turns``) only calls ``send`` and ``wait``, so unit tests plug in a
fake worker and the lead can swap the transport without touching the flow.

``CeleryDispatcher`` sends with ``app.send_task(names.TASK_TURN, ...)`` and waits
on the Redis result backend's pub/sub consumer (``AsyncResult.get`` with a 1 ms
drain interval): the outcome arrives as soon as the worker stores it, without
polling. Celery keeps one result backend per thread, so each API thread sends
and waits on its own consumer; ``send`` and ``wait`` of a turn must run on the
same thread (the API's sync handlers do).
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from celery.result import AsyncResult

from sandgrid.errors import InfrastructureError, SandboxError, SandgridError
from sandgrid.wire import names
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from scheduler.task_repr import describe

__all__ = [
    "DRAIN_INTERVAL_S",
    "CeleryDispatcher",
    "Dispatcher",
    "outcome_from_result",
    "task_id_of",
]

#: How often ``AsyncResult.get`` drains the result consumer (s).
DRAIN_INTERVAL_S = 0.001


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


class CeleryDispatcher:
    """The production dispatcher over a Celery app (see ``sandgrid.wire.celery_app``)."""

    def __init__(self, app: Celery, *, drain_interval_s: float = DRAIN_INTERVAL_S) -> None:
        self.app = app
        #: How often a waiting thread drains the result consumer. Batch runners wait
        #: with a coarser interval: dozens of threads polling at 1 kHz would take
        #: the CPU (and the GIL) from interactive turns.
        self.drain_interval_s = drain_interval_s

    def send(self, job: TurnJob, queue: str, *, expires: float) -> AsyncResult[Any]:
        result: AsyncResult[Any] = self.app.send_task(
            names.TASK_TURN,
            args=[job.model_dump(mode="json")],
            queue=queue,
            task_id=task_id_of(job),
            expires=expires,
            argsrepr=describe(job),  # Flower and logs: a summary, never contents
            kwargsrepr="{}",
        )
        return result

    def wait(self, handle: AsyncResult[Any], timeout: float) -> TurnOutcome | None:
        try:
            value = handle.get(timeout=timeout, interval=self.drain_interval_s, propagate=False)
        except CeleryTimeout:
            return None
        except (OSError, ConnectionError) as exc:
            raise InfrastructureError(
                f"result backend unreachable: {exc}", operation="turn.wait"
            ) from exc
        return outcome_from_result(handle, value)

    def forget(self, handle: AsyncResult[Any]) -> None:
        # Best effort: the result expires anyway (result_expires).
        with contextlib.suppress(Exception):
            handle.forget()


def outcome_from_result(handle: AsyncResult[Any], value: Any) -> TurnOutcome:
    """Map what the task returned (or raised) to a ``TurnOutcome``.

    The worker's task returns a ``TurnOutcome`` dump; anything else means the task
    itself failed (a bug or a crash in the worker glue), reported as a sandbox error.
    """
    turn_id = str(handle.id).rsplit(".", 1)[0]
    if isinstance(value, dict) and "ok" in value:
        return TurnOutcome.model_validate(value)
    if isinstance(value, BaseException):
        err: SandgridError = SandboxError(
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
