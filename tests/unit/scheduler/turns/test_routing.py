"""Routing: the owner's direct queue when live, else the type's shared queue."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sandgrid.models import Quotas, SessionInfo
from scheduler.turns.routing import choose_queue, route


def _session(owner: str | None, type_: str = "python") -> SessionInfo:
    now = datetime.now(UTC)
    return SessionInfo(
        id="s-" + "a" * 32,
        tenant="t",
        type=type_,
        quotas=Quotas(),
        owner=owner,
        created_at=now,
        last_used=now,
    )


@pytest.mark.parametrize(
    ("owner", "alive", "batch", "queue"),
    [
        ("w1", True, False, "node.w1"),
        ("w1", True, True, "node.w1"),
        ("w1", False, False, "sbx.python"),
        ("w1", False, True, "sbx.python.batch"),
        (None, True, False, "sbx.python"),
        (None, False, True, "sbx.python.batch"),
    ],
)
def test_choose_queue(owner: str | None, alive: bool, batch: bool, queue: str) -> None:
    assert choose_queue(_session(owner), owner_alive=alive, batch=batch) == queue


class _Nodes:
    def __init__(self, *alive: str) -> None:
        self.alive = set(alive)
        self.asked: list[str] = []

    def node_alive(self, node: str) -> bool:
        self.asked.append(node)
        return node in self.alive


def test_route_asks_about_the_owner_only() -> None:
    nodes = _Nodes("w1")
    assert route(nodes, _session("w1")) == "node.w1"
    assert route(nodes, _session("w2", "node-js")) == "sbx.node-js"
    assert route(nodes, _session(None)) == "sbx.python"
    assert nodes.asked == ["w1", "w2"]
