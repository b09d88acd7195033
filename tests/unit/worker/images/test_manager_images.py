"""SandboxManager asks the node's puller for a type's image before it creates (25.3)."""

from __future__ import annotations

import pytest

from sandgrid.errors import CapacityError
from tests.unit.worker.agent.test_scan import StubRuntime
from tests.unit.worker.images.fakes import FakeEngine
from worker.images.puller import ImagePuller
from worker.runtimes.spec import SandboxSpec
from worker.sandboxes.manager import SandboxManager

REG = "127.0.0.1:5000"


class RecordingRuntime(StubRuntime):
    """Records the image of each create, then refuses it (no sandbox is needed)."""

    name = "runc"

    def __init__(self) -> None:
        self.images: list[str] = []

    def create(self, spec: SandboxSpec) -> str:
        self.images.append(spec.image)
        raise RuntimeError("stop here")


def test_an_absent_image_is_pulled_and_the_sandbox_made_from_it() -> None:
    remote = f"{REG}/sandgrid/sandbox-python:latest"
    engine, runtime = FakeEngine(registry={remote}), RecordingRuntime()
    manager = SandboxManager(runtime, node="n1", images=ImagePuller(engine, REG, node="n1").ensure)
    with pytest.raises(CapacityError):
        manager.create("python")
    assert engine.pulls == [remote] and runtime.images == [remote]


def test_an_image_the_registry_lacks_refuses_the_create_before_the_engine() -> None:
    runtime = RecordingRuntime()
    puller = ImagePuller(FakeEngine(), REG, node="n1")
    manager = SandboxManager(runtime, node="n1", images=puller.ensure)
    with pytest.raises(CapacityError, match=r"registry 127\.0\.0\.1:5000 has no"):
        manager.create("python")
    assert runtime.images == []


def test_without_a_puller_the_catalog_image_is_used_as_it_is() -> None:
    runtime = RecordingRuntime()
    with pytest.raises(CapacityError):
        SandboxManager(runtime, node="n1").create("python")
    assert runtime.images == ["sandgrid/sandbox-python:latest"]
