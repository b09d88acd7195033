"""The sandbox modules of the data plane declare an accurate ``__all__``."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "worker.agent",
    "worker.agent.access",
    "worker.agent.errors",
    "worker.agent.exec",
    "worker.agent.files",
    "worker.agent.framing",
    "worker.agent.limits",
    "worker.agent.main",
    "worker.agent.processes",
    "worker.agent.reaper",
    "worker.agent.safetar",
    "worker.agent.scan",
    "worker.agent.scanstate",
    "worker.agent.transfer",
    "worker.agent_api",
    "worker.agent_bundle",
    "worker.backends",
    "worker.backends.base",
    "worker.backends.docker",
    "worker.backends.gvisor",
    "worker.channel",
    "worker.pool",
    "worker.protocol",
    "worker.quotas",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_declared_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    for member in module.__all__:
        assert hasattr(module, member), f"{name}.__all__ names missing {member!r}"


def test_backend_is_abstract() -> None:
    from worker.backends.base import SandboxBackend

    with pytest.raises(TypeError, match="abstract"):
        SandboxBackend()  # type: ignore[abstract]
