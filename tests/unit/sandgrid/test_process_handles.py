"""The SDK's background-process handles: sync and async alike, bad arguments refused."""

from __future__ import annotations

import inspect

import pytest

from sandgrid.client import AsyncBackgroundProcess, BackgroundProcess
from sandgrid.client._process_calls import ProcessRef, check_background, logs_call, wait_step
from sandgrid.errors import InvalidInput


def test_sync_and_async_handles_have_the_same_methods() -> None:
    def public(cls: type) -> dict[str, list[tuple[str, object]]]:
        return {
            n: [(p.name, p.default) for p in inspect.signature(m).parameters.values()]
            for n, m in inspect.getmembers(cls, inspect.isfunction)
            if not n.startswith("_")
        }

    assert public(BackgroundProcess) == public(AsyncBackgroundProcess)
    for name in public(AsyncBackgroundProcess):
        assert inspect.iscoroutinefunction(getattr(AsyncBackgroundProcess, name)), name


def test_background_refuses_a_deadline_or_a_key() -> None:
    with pytest.raises(InvalidInput) as err:
        check_background(5.0, None)
    assert err.value.context["field"] == "timeout_s"
    with pytest.raises(InvalidInput) as err:
        check_background(None, "key-12345")
    assert err.value.context["field"] == "idempotency_key"
    check_background(None, None)


def test_calls_carry_the_sandbox_and_bounded_waits() -> None:
    call = logs_call(ProcessRef("s-1", 7, "sbx"), 12)
    assert (call.path, call.params) == (
        "/v1/sessions/s-1/processes/7/logs",
        {"since": 12, "sandbox": "sbx"},
    )
    assert logs_call(ProcessRef("s-1", 7, ""), 0).params == {"since": 0}
    assert (wait_step(None), wait_step(3.0), wait_step(-1.0)) == (10.0, 3.0, 0.0)
