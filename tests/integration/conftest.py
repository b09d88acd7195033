"""Fixtures of the integration tests: the real Docker engine and every registered runtime.

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
from worker.quotas import LABEL_INCARNATION, LABEL_WORKER
from worker.runtimes import RUNTIMES, runtime_for
from worker.runtimes.docker import DockerRuntime
from worker.sandboxes import Sandbox, SandboxManager
from worker.sandboxes.manager import INCARNATION

TEST_NODE = "pytest-node"
_MARKS = {"runsc": pytest.mark.runsc}  # deselect with -m "not runsc" where gVisor is missing
RUNTIME_PARAMS = [pytest.param(name, id=name, marks=_MARKS.get(name, ())) for name in RUNTIMES]
"""Every runtime of ``worker.runtimes.RUNTIMES``: the contract suites run on each."""

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


@pytest.fixture(scope="module", params=RUNTIME_PARAMS)
def backend(request: pytest.FixtureRequest, docker_client: Any) -> Iterator[SandboxManager]:
    """A real sandbox manager per registered runtime; at the end no container it made
    may remain."""
    runtime = runtime_for(str(request.param), client=docker_client)
    if isinstance(runtime, DockerRuntime):
        _runtime_available(docker_client, runtime.oci_runtime)
    yield SandboxManager(runtime, node=TEST_NODE)
    assert not leftovers(docker_client), "containers left behind"


def _factory(backend: SandboxManager) -> Iterator[SandboxFactory]:
    made: list[Sandbox] = []

    def make(sandbox_type: str = "python", quotas: Quotas | None = None, **kw: Any) -> Sandbox:
        sbx = backend.create(sandbox_type, quotas, **kw)
        made.append(sbx)
        return sbx

    yield make
    for sbx in made:
        backend.destroy(sbx)


@pytest.fixture
def sandbox_factory(backend: SandboxManager) -> Iterator[SandboxFactory]:
    """Create sandboxes in a test; all are destroyed when the test ends."""
    yield from _factory(backend)


@pytest.fixture(scope="module")
def module_factory(backend: SandboxManager) -> Iterator[SandboxFactory]:
    yield from _factory(backend)


@pytest.fixture(scope="module")
def shared(module_factory: SandboxFactory) -> Sandbox:
    """One sandbox shared by the read-mostly tests of a module (creation is the slow part)."""
    return module_factory()
