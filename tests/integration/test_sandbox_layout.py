"""A sandbox with no network, made with the engine's networking off, on every runtime:
``localhost`` still resolves and serves, the host's resolver is not visible, and
under gVisor the host's memory limit carries the sentry's headroom (written into
the container's cgroup) while the program sees its quota. A memory image saved in
the engine's own network layout (before it was turned off) still restores."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from sandgrid.errors import CapacityError
from sandgrid.models import Quotas, SessionInfo
from tests.integration.conftest import SandboxFactory
from tests.support.sandbox_calls import run
from worker.runtimes.docker_runsc import DockerRunsc
from worker.sandboxes import SandboxManager
from worker.turns import memory

pytestmark = pytest.mark.integration

SERVE = (
    "import socket, threading\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "threading.Thread(target=lambda: s.accept()[0].sendall(b'up'), daemon=True).start()\n"
    "c = socket.create_connection(('localhost', s.getsockname()[1]), timeout=5)\n"
    "names = [socket.gethostbyname(n) for n in ('localhost', 'sandbox')]\n"
    "print(c.recv(2).decode(), *names)\n"
)


def _raw(backend: SandboxManager, container: str) -> Any:
    engine: Any = backend.engine  # a Docker runtime: the engine's own record
    return engine.client.api.inspect_container(container)


def test_localhost_resolves_and_serves_with_no_engine_network(
    backend: SandboxManager, sandbox_factory: SandboxFactory
) -> None:
    sbx = sandbox_factory()
    assert _raw(backend, sbx.id)["Config"].get("NetworkDisabled") is True
    r = run(backend, sbx, argv=["python3", "-c", SERVE])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == ["up", "127.0.0.1", "127.0.0.1"]
    resolv = run(backend, sbx, shell="cat /etc/resolv.conf 2>/dev/null; true").stdout
    assert "nameserver" not in resolv  # no host resolver shown: no DNS in a sandbox
    assert run(backend, sbx, shell="echo x >> /etc/hosts").exit_code != 0  # read-only


def _host_memory_limit(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ":memory:" in x)
    group = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
    return int((group / "memory.limit_in_bytes").read_text())


def test_runsc_headroom_is_in_the_cgroup_and_the_quota_is_what_the_program_sees(
    backend: SandboxManager, sandbox_factory: SandboxFactory
) -> None:
    if not isinstance(backend.engine, DockerRunsc):
        pytest.skip("the sentry's headroom is gVisor's")
    quotas = Quotas(memory_mb=300)
    sbx = sandbox_factory("python", quotas)
    pid = int(_raw(backend, sbx.id)["State"]["Pid"])
    headroom = DockerRunsc.sentry_memory_headroom_mb
    assert _host_memory_limit(pid) == (300 + headroom) << 20
    meminfo = run(backend, sbx, argv=["head", "-1", "/proc/meminfo"]).stdout
    assert meminfo.split()[1:] == [str(300 << 10), "kB"]


def _info(quotas: Quotas) -> SessionInfo:
    now = dt.datetime.now(dt.UTC)
    return SessionInfo(
        id="s-layout", tenant="acme", type="python-gvisor", quotas=quotas, created_at=now,
        last_used=now,
    )  # fmt: skip


def test_an_image_saved_in_the_engines_network_layout_restores(
    backend: SandboxManager, sandbox_factory: SandboxFactory, tmp_path: Path
) -> None:
    if not backend.engine.can_checkpoint:
        pytest.skip("memory images are gVisor's")
    quotas = Quotas()
    old = sandbox_factory("python-gvisor", quotas, engine_network=True)  # the old layout
    assert run(backend, old, shell="echo kept > /workspace/f").exit_code == 0
    image = tmp_path / "image"
    image.mkdir()
    assert isinstance(backend.engine, DockerRunsc)
    backend.engine.checkpoint(old.id, image)
    backend.destroy(old)
    with pytest.raises(CapacityError) as refused:  # runsc: the mounts differ
        backend.create("python-gvisor", quotas, restore_image=image)
    assert backend.engine.refused_layout(refused.value)
    gate = memory._Gate(lambda: None)  # its first create takes the node's turn
    try:
        sbx = memory._create_restoring(backend, _info(quotas), image, gate)
    finally:
        gate.release()
    try:
        assert run(backend, sbx, argv=["cat", "/workspace/f"]).stdout == "kept\n"
        assert not _raw(backend, sbx.id)["Config"].get("NetworkDisabled")
    finally:
        backend.destroy(sbx)
