"""Fixtures of the integration tests: the real Docker engine and both runtimes.

Docker missing is a skip on a developer's machine and a *failure* in CI
(``CI=true``), so a broken CI host cannot pass silently. Every container a
fixture creates is removed at teardown, and each runtime's module ends by
checking that no container of this test process and node is left.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandgrid.models import Quotas
from worker.backends import Sandbox, SandboxBackend, backend_for
from worker.backends.base import INCARNATION
from worker.quotas import LABEL_INCARNATION, LABEL_WORKER

TEST_NODE = "pytest-node"
RUNTIMES = [
    pytest.param("runc", id="runc"),
    pytest.param("runsc", id="runsc", marks=pytest.mark.runsc),
]

SandboxFactory = Callable[..., Sandbox]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"integration services missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client() -> Any:
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
        client.images.get("sandgrid/sandbox-python:latest")
    except Exception as exc:
        _unavailable(f"Docker or the sandbox image is not available: {exc}")
    return client


def _runtime_available(client: Any, runtime: str) -> None:
    runtimes = client.info().get("Runtimes", {})
    if runtime not in runtimes:
        _unavailable(f"Docker runtime {runtime!r} is not registered")


def leftovers(client: Any) -> list[str]:
    """Names of the containers this test run created that still exist."""
    labels = [f"{LABEL_INCARNATION}={INCARNATION}", f"{LABEL_WORKER}={TEST_NODE}"]
    rows = client.api.containers(all=True, filters={"label": labels})
    return [str(row["Names"][0]) for row in rows]


@pytest.fixture(scope="module", params=RUNTIMES)
def backend(request: pytest.FixtureRequest, docker_client: Any) -> Iterator[SandboxBackend]:
    """A real backend per runtime; at the end no container it made may remain."""
    runtime = str(request.param)
    _runtime_available(docker_client, runtime)
    yield backend_for(runtime, client=docker_client, node=TEST_NODE)
    assert not leftovers(docker_client), "containers left behind"


def _factory(backend: SandboxBackend) -> Iterator[SandboxFactory]:
    made: list[Sandbox] = []

    def make(sandbox_type: str = "python", quotas: Quotas | None = None, **kw: Any) -> Sandbox:
        sbx = backend.create(sandbox_type, quotas, **kw)
        made.append(sbx)
        return sbx

    yield make
    for sbx in made:
        backend.destroy(sbx)


@pytest.fixture
def sandbox_factory(backend: SandboxBackend) -> Iterator[SandboxFactory]:
    """Create sandboxes in a test; all are destroyed when the test ends."""
    yield from _factory(backend)


@pytest.fixture(scope="module")
def module_factory(backend: SandboxBackend) -> Iterator[SandboxFactory]:
    yield from _factory(backend)


@pytest.fixture(scope="module")
def shared(module_factory: SandboxFactory) -> Sandbox:
    """One sandbox shared by the read-mostly tests of a module (creation is the slow part)."""
    return module_factory()
