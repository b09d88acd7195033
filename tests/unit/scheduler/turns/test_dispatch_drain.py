"""The API's wait on a turn's result honours its timeout (``scheduler.turns.dispatch``).

Celery 5.7 drains the Redis result consumer in slices of 1 s whatever timeout
``AsyncResult.get`` is given; the dispatcher installs a drainer whose slices
never pass the caller's timeout, so the API's heartbeat check on a turn's worker
runs every ``lost_check_s`` as configured.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from celery.backends.asynchronous import Drainer
from celery.exceptions import TimeoutError as CeleryTimeout

from scheduler.turns.dispatch import CeleryDispatcher, _DeadlineDrainer


class _Pending:
    ready = False


def test_each_drain_waits_no_longer_than_the_timeout() -> None:
    waits: list[float] = []
    drainer: Any = _DeadlineDrainer(cast(Any, None))
    steps = drainer.drain_events_until(
        _Pending(), timeout=0.25, wait=lambda timeout: waits.append(timeout)
    )
    next(steps)
    next(steps)
    assert waits == [0.25, 0.25]


def test_celery_default_drainer_would_wait_a_whole_second() -> None:
    """What the deadline drainer fixes (if Celery fixes it, this test says so)."""
    waits: list[float] = []
    default: Any = Drainer(cast(Any, None))
    steps = default.drain_events_until(
        _Pending(), timeout=0.25, wait=lambda timeout: waits.append(timeout)
    )
    next(steps)
    assert waits == [1]


def test_the_dispatcher_installs_the_deadline_drainer_on_its_thread_consumer() -> None:
    consumer = SimpleNamespace()
    consumer.drainer = Drainer(cast(Any, consumer))

    def get(**_: Any) -> None:
        raise CeleryTimeout()

    handle = SimpleNamespace(backend=SimpleNamespace(result_consumer=consumer), get=get)
    dispatcher = CeleryDispatcher.__new__(CeleryDispatcher)
    dispatcher.drain_interval_s = 0.001
    assert dispatcher.wait(handle, 0.25) is None  # type: ignore[arg-type]
    assert isinstance(consumer.drainer, _DeadlineDrainer)
    installed = consumer.drainer
    dispatcher.wait(handle, 0.25)  # type: ignore[arg-type]
    assert consumer.drainer is installed


def test_a_result_the_consumer_missed_is_read_from_its_key(monkeypatch: Any) -> None:
    """Published while the consumer's connection was down: no message will come."""
    import scheduler.turns.dispatch as dispatch

    monkeypatch.setattr(dispatch, "STORED_CHECK_S", 0.0)
    outcome = {
        "v": 1,
        "turn_id": "t-1",
        "node": "w1",
        "ok": True,
        "result": {"kind": "exec", "exit_code": 0},
    }
    reads: list[str] = []

    def get_task_meta(task_id: str) -> dict[str, Any]:
        reads.append(task_id)
        return {"status": "SUCCESS", "result": outcome}

    def get(**_: Any) -> None:
        raise CeleryTimeout()

    consumer = SimpleNamespace()
    consumer.drainer = Drainer(cast(Any, consumer))
    backend = SimpleNamespace(result_consumer=consumer, get_task_meta=get_task_meta)
    handle = SimpleNamespace(id="t-1.1", backend=backend, get=get, state="SUCCESS")
    dispatcher = CeleryDispatcher.__new__(CeleryDispatcher)
    dispatcher.drain_interval_s = 0.001
    assert dispatcher.wait(handle, 0.25) is None and reads == []  # type: ignore[arg-type]
    got = dispatcher.wait(handle, 0.25)  # type: ignore[arg-type]
    assert got is not None and got.ok and got.node == "w1" and reads == ["t-1.1"]


def test_a_wait_reads_the_result_key_only_for_handles_not_subscribed_before_sending() -> None:
    """``send`` subscribes before it publishes, so its handles' waits skip Celery's
    read of the result key; a handle of a turn sent elsewhere keeps it."""
    reads: list[Any] = []
    consumer = SimpleNamespace(on_wait_for_pending=lambda result, **_: reads.append(result))
    consumer.drainer = Drainer(cast(Any, consumer))
    sent = SimpleNamespace(backend=SimpleNamespace(result_consumer=consumer))
    sent._sandgrid_subscribed = True
    other = SimpleNamespace(backend=SimpleNamespace(result_consumer=consumer))

    def waiting(handle: Any) -> Any:
        def get(**_: Any) -> None:
            consumer.on_wait_for_pending(handle, timeout=0.25)
            raise CeleryTimeout()

        handle.get = get
        return handle

    dispatcher = CeleryDispatcher.__new__(CeleryDispatcher)
    dispatcher.drain_interval_s = 0.001
    dispatcher.wait(waiting(sent), 0.25)
    dispatcher.wait(waiting(other), 0.25)
    assert reads == [other]
