"""Routing: the owner's direct queue when live, a paused session's staging node when
live, else the type's shared queue."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sandgrid.models import Quotas, SessionInfo
from sandgrid.wire import names
from scheduler.turns.routing import CachedLiveness, choose_queue, route


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


def _paused(staged_on: str | None, image: str | None = "f" * 64) -> SessionInfo:
    return _session(None).model_copy(update={"memory_image": image, "memory_staged_on": staged_on})


@pytest.mark.parametrize(
    ("session", "staged_alive", "queue"),
    [
        (_paused("w2"), True, "node.w2"),
        (_paused("w2"), False, "sbx.python"),
        (_paused(None), True, "sbx.python"),
        (_paused("w2", image=None), True, "sbx.python"),  # resumed already: nothing staged
    ],
)
def test_a_paused_session_goes_to_the_node_that_staged_its_image(
    session: SessionInfo, staged_alive: bool, queue: str
) -> None:
    assert choose_queue(session, owner_alive=False, staged_alive=staged_alive) == queue


def test_the_live_owner_wins_over_the_staging_node() -> None:
    session = _paused("w2").model_copy(update={"owner": "w1"})
    assert choose_queue(session, owner_alive=True, staged_alive=True) == "node.w1"
    nodes = _Nodes("w1", "w2")
    assert route(nodes, session) == "node.w1"
    assert nodes.asked == ["w1"]


def test_route_asks_whether_the_staging_node_lives() -> None:
    assert route(_Nodes("w2"), _paused("w2")) == "node.w2"
    assert route(_Nodes(), _paused("w2")) == "sbx.python"  # it died: any node fetches


class _Cached:
    def __init__(self, alive: set[str]) -> None:
        self.live = alive

    def alive(self, node: str, incarnation: str = "") -> bool:
        return node in self.live


class _Fresh:
    def __init__(self, alive: set[str]) -> None:
        self.live = alive
        self.asked: list[str] = []

    def node_alive(self, node: str) -> bool:
        self.asked.append(node)
        return node in self.live


def test_routing_trusts_the_cached_view_of_a_live_owner() -> None:
    """A turn of a live owner's session asks Redis nothing (issue 22.1: it sent an
    EXISTS of the owner's heartbeat every turn)."""
    fresh = _Fresh({"w1"})
    liveness = CachedLiveness(_Cached({"w1"}), fresh)
    session = _session("w1")
    assert route(liveness, session) == names.node_queue("w1")
    assert fresh.asked == []


def test_an_owner_the_cached_view_misses_is_asked_uncached() -> None:
    """A view older than the owner's first heartbeat must not send its turns to the
    shared queue (another node would find the lease held); a dead owner's do go there."""
    fresh = _Fresh({"w-new"})
    liveness = CachedLiveness(_Cached(set()), fresh)
    new, gone = _session("w-new"), _session("w-gone")
    assert route(liveness, new) == names.node_queue("w-new")
    assert route(liveness, gone) == names.type_queue("python")
    assert fresh.asked == ["w-new", "w-gone"]
