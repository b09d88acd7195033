"""A restore's container is made while its image is fetched, and starts after, one
restore at a time on a node (24.4)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sandgrid.errors import SnapshotError
from tests.unit.worker.agent.test_scan import StubRuntime
from worker.runtimes.spec import SandboxSpec
from worker.sandboxes.manager import SandboxManager
from worker.turns.memory import _Gate


class _Runtime(StubRuntime):
    """Records the order of create, the image wait, start and remove."""

    name = "runsc"

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def create(self, spec: SandboxSpec) -> str:
        self.steps.append("create")
        return "cid"

    def attach(self, sandbox_id: str, name: str) -> Any:
        self.steps.append("attach")
        raise RuntimeError("stop here: the start is what the test looks for")

    def remove(self, sandbox_id: str) -> None:
        self.steps.append("remove")


def test_the_container_waits_for_its_image_before_it_starts() -> None:
    steps: list[str] = []
    manager = SandboxManager(_Runtime(steps), node="n1")
    with pytest.raises(Exception, match="did not come up"):
        manager.create("python-gvisor", before_start=lambda: steps.append("image whole"))
    assert steps == ["create", "image whole", "attach", "remove"]


def test_an_image_refused_meanwhile_removes_the_container_and_says_why() -> None:
    steps: list[str] = []

    def refused() -> None:
        raise SnapshotError("memory image 1a2b fails verification (chunk 3c4d)")

    manager = SandboxManager(_Runtime(steps), node="n1")
    with pytest.raises(SnapshotError, match="fails verification"):
        manager.create("python-gvisor", before_start=refused)
    assert steps == ["create", "remove"]


def test_a_node_runs_one_restore_at_a_time_the_next_image_fetched_meanwhile() -> None:
    fetched, started = threading.Event(), threading.Event()
    first, second = _Gate(lambda: None), _Gate(fetched.set)
    first()  # restoring: holds the node's one turn
    waiting = threading.Thread(target=lambda: (second(), started.set()))
    waiting.start()
    assert fetched.wait(5)  # the next image is fetched while the first restores
    assert not started.wait(0.2)  # but it does not start beside it
    first.release()
    assert started.wait(5)
    second.release()
    second.release()  # given back once only
    waiting.join(5)
    again = _Gate(lambda: None)
    again()  # the turn is free again
    again.release()


def test_a_restore_whose_image_failed_holds_no_turn() -> None:
    def refused() -> None:
        raise SnapshotError("memory image 1a2b fails verification")

    failed = _Gate(refused)
    with pytest.raises(SnapshotError):
        failed()
    failed.release()  # nothing held: nothing given back
    after = _Gate(lambda: None)
    after()
    after.release()
