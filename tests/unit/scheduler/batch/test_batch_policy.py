"""Which failures a batch retries, how long it waits, and what each result says."""

from __future__ import annotations

import contextlib

import pytest

from sandgrid.batch.models import BatchJob
from sandgrid.errors import (
    CapacityError,
    Conflict,
    ErrorCode,
    InfrastructureError,
    InvalidInput,
    SandboxError,
    SandboxLost,
    SandgridError,
)
from sandgrid.models import ExecResult
from scheduler.batch.run import RetryPolicy, error_result, exec_outcome

JOB = BatchJob(id="j1", argv=["true"])


@pytest.mark.parametrize(
    ("err", "retried"),
    [
        (InfrastructureError("lost", code=ErrorCode.WORKER_LOST, retryable=False), True),
        (SandboxLost("channel broke"), True),
        (CapacityError("no container"), True),
        (InfrastructureError("minio down", code=ErrorCode.STORE_UNAVAILABLE), True),
        (SandgridError("flaky", retryable=True), True),
        (InfrastructureError("late", code=ErrorCode.TURN_TIMEOUT, retryable=False), False),
        (SandboxError("agent refused"), False),
        (InvalidInput("bad cwd"), False),
        (Conflict("closed", code=ErrorCode.SESSION_CLOSED), False),
    ],
)
def test_only_infrastructure_failures_are_retried(err: SandgridError, retried: bool) -> None:
    policy = RetryPolicy(max_attempts=3)
    assert policy.should_retry(err, 1) is retried
    assert policy.should_retry(err, 3) is False  # the last attempt is final


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    policy = RetryPolicy(base_s=1.0, cap_s=5.0)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (9, 5.0)):
        waits = [policy.backoff(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), (attempt, waits)


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"exit_code": 0}, "ok"),
        ({"exit_code": 3}, "failed"),
        ({"exit_code": None, "timed_out": True}, "failed"),
        ({"exit_code": 0, "oom_killed": True}, "failed"),
        ({"exit_code": None, "signal": 9}, "failed"),
    ],
)
def test_a_job_that_ran_is_ok_only_on_exit_zero(fields: dict[str, object], status: str) -> None:
    result = ExecResult.model_validate({"stdout": "out", "node": "w1", **fields})
    line = exec_outcome(JOB, result, attempts=2)
    assert (line.id, line.status, line.attempts, line.node, line.stdout) == (
        "j1",
        status,
        2,
        "w1",
        "out",
    )


def test_an_error_result_carries_the_error_body() -> None:
    line = error_result(JOB, SandboxLost("broke", operation="exec"), attempts=4)
    assert line.status == "error" and line.attempts == 4
    assert line.error is not None and line.error["code"] == "sandbox_lost"


def test_batches_yield_while_interactive_turns_flow() -> None:
    import time

    from scheduler.batch.capacity import InteractiveActivity

    activity = InteractiveActivity(window_s=0.2, paced_share=0.25, duty_gap=1.0)
    assert (activity.limit(8), activity.gap(0.05)) == (8, 0.0)  # no interactive traffic
    activity.mark()
    assert activity.active()
    assert (activity.limit(8), activity.limit(2), activity.gap(0.05)) == (2, 1, 0.05)
    time.sleep(0.25)
    assert (activity.limit(8), activity.gap(0.05)) == (8, 0.0)


def test_interactive_turns_mark_activity_and_batch_turns_do_not() -> None:
    from unittest.mock import MagicMock

    from scheduler.turns.runner import TurnRunner

    seen: list[int] = []
    runner = TurnRunner(
        MagicMock(),
        MagicMock(),
        MagicMock(),
        recovery=MagicMock(),
        idempotency=MagicMock(),
        cancels=MagicMock(),
        on_interactive=lambda: seen.append(1),
    )
    session = MagicMock(state="closed")
    for batch in (True, False):
        with contextlib.suppress(SandgridError):  # a closed session: refused after the mark
            runner.run(MagicMock(), session, MagicMock(), timeout_s=None, batch=batch)
    assert seen == [1]
