"""Roots and the checks on them."""

from __future__ import annotations

from worker.agent.limits import ROOTS, inside


def test_inside() -> None:
    assert inside("/workspace", ROOTS) and inside("/workspace/a", ROOTS)
    assert not inside("/workspacefoo", ROOTS) and not inside("/etc", ROOTS)
