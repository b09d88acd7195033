"""A build's phases line (issue 25): each phase once, in the order they ended, repeats added
up, then the total; times only."""

from __future__ import annotations

import re

from worker.templates.phases import Phases


def test_the_line_names_each_phase_once_then_the_total() -> None:
    phases = Phases()
    for name in ("start", "steps", "start"):
        with phases(name):
            pass
    line = phases.line()
    assert re.fullmatch(r"start_ms=[\d.]+ steps_ms=[\d.]+ total_ms=[\d.]+", line), line


def test_a_phase_that_raises_is_still_timed() -> None:
    phases = Phases()
    try:
        with phases("load"):
            raise RuntimeError("engine gone")
    except RuntimeError:
        pass
    assert "load" in phases.ms
