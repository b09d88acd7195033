"""A reserved turn message that waits for a thread is noted as held by this node's process
(Celery's task_received)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sandgrid.wire import names
from worker import tasks


class Ledger:
    def __init__(self) -> None:
        self.noted: list[tuple[Any, ...]] = []

    def receive_turn(self, turn_id: str, node: str, attempt: int, incarnation: str) -> bool:
        self.noted.append((turn_id, node, attempt, incarnation))
        return True


@pytest.fixture(autouse=True)
def _threads_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every thread of the node busy: a message received now waits (it is noted)."""
    monkeypatch.setattr(tasks.gate, "threads", 0)


def test_a_turn_message_is_noted_with_node_and_incarnation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = Ledger()
    node = SimpleNamespace(name="w1", incarnation="inc-1", ledger=ledger)
    monkeypatch.setattr(tasks, "get_node", lambda: node)
    job = {"turn_id": "t-1", "attempt": 2}
    tasks.note_received(request=SimpleNamespace(task_name=names.TASK_TURN, args=[job], id="x"))
    tasks.note_received(request=SimpleNamespace(task_name="other", args=[job], id="y"))
    assert ledger.noted == [("t-1", "w1", 2, "inc-1")]


def test_a_failure_to_note_never_stops_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Any:
        raise RuntimeError("the worker node is not started")

    monkeypatch.setattr(tasks, "get_node", broken)
    request = SimpleNamespace(task_name=names.TASK_TURN, args=[{"turn_id": "t"}], id="z")
    tasks.note_received(request=request)  # logged, not raised


def test_a_message_that_finds_a_thread_free_is_not_noted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its claim comes at once and names the process: the note would cost three
    commands and a round trip on the consumer's thread before the turn starts."""
    ledger = Ledger()
    node = SimpleNamespace(name="w1", incarnation="inc-1", ledger=ledger)
    monkeypatch.setattr(tasks, "get_node", lambda: node)
    monkeypatch.setattr(tasks.gate, "threads", 2)
    held = [SimpleNamespace(id="running")]  # one other message in this process
    monkeypatch.setattr(tasks.worker_state, "reserved_requests", held)
    job = {"turn_id": "t-1", "attempt": 1}
    tasks.note_received(request=SimpleNamespace(task_name=names.TASK_TURN, args=[job], id="x"))
    assert ledger.noted == []
    held.append(SimpleNamespace(id="waiting"))  # both threads taken: this one waits
    tasks.note_received(request=SimpleNamespace(task_name=names.TASK_TURN, args=[job], id="y"))
    assert ledger.noted == [("t-1", "w1", 1, "inc-1")]
