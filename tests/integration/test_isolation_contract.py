"""The runtime contract, isolation: what the sandbox's user cannot reach or do, the
agent's channel lost or shared (the rest of the contract: ``test_backend_contract.py``).

Most tests share one sandbox per runtime (creating one is the slow part); the
tests that break a sandbox make their own.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sandgrid.errors import InvalidInput, SandboxError, SandboxLost
from sandgrid.models import Quotas
from tests.support.sandbox_calls import run
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration


# ---- isolation and hardening -------------------------------------------------------


def test_user_cannot_touch_the_agent(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="kill -9 1; echo rc=$?")
    assert "rc=1" in r.stdout
    r = run(backend, shared, shell="echo x > /proc/1/fd/0; echo rc=$?; ls /proc/1/fd; echo rc=$?")
    assert r.stdout == "rc=2\nrc=2\n"
    r = run(
        backend,
        shared,
        python=(
            "import ctypes,os; libc=ctypes.CDLL(None,use_errno=True)\n"
            "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())"
        ),
    )  # fmt: skip  PTRACE_ATTACH
    assert r.stdout.startswith("-1 ")
    r = run(backend, shared, shell="echo x >> /opt/sandgrid/agent.py; echo rc=$?")
    assert "rc=1" in r.stdout or "rc=2" in r.stdout
    backend.ping(shared)


def test_hardening(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="id -u; id -g; id -G; grep CapEff /proc/self/status")
    assert r.stdout == "1000\n1000\n1000\nCapEff:\t0000000000000000\n"
    root = run(backend, shared, shell="grep '^[^ ]* / ' /proc/mounts").stdout.split()
    assert root[3].split(",")[0] == "ro"
    assert run(backend, shared, shell="touch /x || touch /usr/x").exit_code == 1
    r = run(backend, shared, argv=["python3", "-c", "import socket; print(socket.if_nameindex())"])
    assert r.stdout == "[(1, 'lo')]\n"
    r = run(backend, shared, shell="grep NoNewPrivs /proc/self/status")
    assert r.stdout.split() == ["NoNewPrivs:", "1"]
    info = backend.inspect(shared)
    assert info["running"] and info["runtime"] == backend.runtime
    assert (
        info["labels"]["sandgrid.worker"] == backend.node
        and info["labels"]["sandgrid.managed"] == "1"
    )


def test_no_user_namespaces(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="unshare -r true; echo rc=$?; unshare -U true; echo rc=$?")
    assert r.stdout == "rc=1\nrc=1\n" and "Operation not permitted" in r.stderr
    code = "import threading\nt = threading.Thread(target=print, args=('t',)); t.start(); t.join()"
    assert run(backend, shared, python=code).stdout == "t\n"  # clone3 refused with ENOSYS


def test_no_setuid_or_setgid_file(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="find / -xdev -perm /6000 -type f 2>/dev/null", timeout_s=20)
    assert r.stdout == ""


def test_lost_channel(backend: SandboxManager, sandbox_factory: Any, docker_client: Any) -> None:
    sbx = sandbox_factory()
    docker_client.api.kill(sbx.id)
    with pytest.raises(SandboxLost):
        backend.ping(sbx)
    assert sbx.state == "lost"
    with pytest.raises(SandboxError):
        run(backend, sbx, argv=["true"])


def test_concurrent_requests_are_serialised(backend: SandboxManager, shared: Sandbox) -> None:
    results: list[str] = []

    def worker(i: int) -> None:
        results.append(run(backend, shared, shell=f"echo {i}").stdout)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"{i}\n" for i in range(8))


def test_network_needs_permission(backend: SandboxManager) -> None:
    with pytest.raises(InvalidInput) as err:
        backend.create("python", Quotas(network=True))
    assert err.value.context["field"] == "quotas.network"
