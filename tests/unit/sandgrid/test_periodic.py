"""The periodic loop of both sides: ticks on time, survives a failing tick, stops."""

from __future__ import annotations

import logging
import threading

import pytest

from sandgrid.wire.periodic import Periodic


def test_it_ticks_until_stopped() -> None:
    ticked = threading.Event()
    count: list[int] = []

    def tick() -> None:
        count.append(1)
        if len(count) >= 3:
            ticked.set()

    loop = Periodic(tick, 0.01, "test", logging.getLogger("test"))
    loop.start()
    assert ticked.wait(5)
    loop.stop()
    seen = len(count)
    threading.Event().wait(0.05)
    assert len(count) == seen  # no tick after stop


def test_a_failing_tick_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    errors: list[int] = []
    again = threading.Event()

    def tick() -> None:
        if errors:
            again.set()
            return
        raise RuntimeError("boom")

    loop = Periodic(
        tick, 0.01, "flaky", logging.getLogger("test.flaky"), on_error=lambda: errors.append(1)
    )
    with caplog.at_level(logging.ERROR, logger="test.flaky"):
        loop.start()
        assert again.wait(5)
        loop.stop()
    assert errors == [1]
    assert any("flaky failed" in r.getMessage() for r in caplog.records)


def test_stop_before_start_is_harmless() -> None:
    Periodic(lambda: None, 1.0, "idle", logging.getLogger("test")).stop()
