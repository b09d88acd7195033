"""The runtime registry: names, lazy imports, and the catalog's runtimes all registered."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sandgrid.models import Quotas
from sandgrid.sandbox_types import KNOWN_RUNTIMES
from sandgrid.wire.catalog import file_catalog
from worker.runtimes import RUNTIMES, Runtime, runtime_for
from worker.runtimes.spec import HostLimits


def test_every_catalog_runtime_is_registered() -> None:
    """The shipped types' runtimes, and every runtime a type may name, are the registry's."""
    assert {t.runtime for t in file_catalog().types.values()} <= set(RUNTIMES)
    assert set(KNOWN_RUNTIMES) == set(RUNTIMES)


def test_an_unknown_runtime_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown sandbox runtime 'firecracker'.*runc"):
        runtime_for("firecracker")


@pytest.mark.parametrize("name", list(RUNTIMES))
def test_each_registered_runtime_is_a_runtime_of_its_name(name: str) -> None:
    module, cls = RUNTIMES[name].split(":")
    made = getattr(__import__(module, fromlist=[cls]), cls)
    assert issubclass(made, Runtime) and made.name == name


def test_host_limits_carry_the_runtimes_headroom() -> None:
    from worker.runtimes.docker_runc import DockerRunc
    from worker.runtimes.docker_runsc import DockerRunsc

    quotas = Quotas(pids=100, memory_mb=256)
    assert DockerRunc.__new__(DockerRunc).host_limits(quotas) == HostLimits(100, 256)
    assert DockerRunsc.__new__(DockerRunsc).host_limits(quotas) == HostLimits(100 * 32 + 1024, 256)


def test_the_runtime_neutral_packages_import_without_docker() -> None:
    """``docker`` blocked: the registry, the manager and the agent client still import,
    and only asking for a Docker runtime needs it."""
    code = (
        "import sys; sys.modules['docker'] = None\n"
        "import worker.runtimes, worker.sandboxes, worker.agent_client, worker.sessions.pool\n"
        "import worker.runtimes.docker_attach\n"
        "try:\n"
        "    worker.runtimes.runtime_for('runc')\n"
        "except ImportError as exc:\n"
        "    assert 'docker' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('a Docker runtime was made without docker')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
