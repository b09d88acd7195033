"""Quotas hold under abuse, on each real runtime: pids, memory, output, disk, CPU."""

from __future__ import annotations

import resource
import time
from typing import Any

import pytest

from sandgrid.models import ExecRequest, Quotas
from worker.ops.exec import exec_command
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration

LIMITED = Quotas(cpus=0.5, memory_mb=256, pids=64, workspace_mb=16, output_bytes=1 << 20)
BOMB_S = 5
"""The fork bomb's deadline: time to reach the pids limit under half a CPU."""


@pytest.fixture(scope="module")
def limited(module_factory: Any) -> Sandbox:
    sbx: Sandbox = module_factory(quotas=LIMITED)
    return sbx


def run(backend: SandboxManager, sbx: Sandbox, **kw: Any) -> Any:
    return exec_command(backend, sbx, ExecRequest(**kw))


def wait_gone(backend: SandboxManager, sbx: Sandbox, within_s: float = 10.0) -> None:
    end = time.monotonic() + within_s
    while backend.inspect(sbx)["status"] != "gone":
        assert time.monotonic() < end, f"{sbx.name} still exists {within_s} s after its kill"
        time.sleep(0.05)


def test_fork_bomb_is_contained(backend: SandboxManager, sandbox_factory: Any) -> None:
    limited = sandbox_factory(quotas=LIMITED)  # its own: a failure here must not cascade
    t0 = time.monotonic()
    # 5 s: on half a CPU of a loaded machine, gVisor's sentry (in the sandbox's cgroup)
    # once took longer than 2 s to reach 64 processes, and no fork had failed yet.
    r = run(backend, limited, shell="b(){ b|b& }; b; sleep 100", timeout_s=BOMB_S)
    assert r.timed_out and time.monotonic() - t0 < BOMB_S + 1.3
    if limited.state == "destroyed":  # cleanly replaced: the worker held the deadline
        wait_gone(backend, limited)  # killed at once, removed in the background
        return
    assert "fork" in r.stderr.lower()  # fork failed inside: the pids limit held
    backend.ping(limited)
    ps = run(backend, limited, argv=["ps", "-e", "-o", "args="]).stdout.splitlines()
    assert ps == ["python3 -I -S /opt/sandgrid/agent.py", "ps -e -o args="]


def test_memory_hog_is_oom_killed(backend: SandboxManager, limited: Sandbox) -> None:
    r = run(
        backend, limited, python="b = []\nwhile True: b.append(bytearray(16 << 20))", timeout_s=20
    )
    assert r.oom_killed and r.signal == 9 and not r.timed_out
    assert run(backend, limited, argv=["echo", "alive"]).stdout == "alive\n"
    assert not run(backend, limited, argv=["true"]).oom_killed  # the flag is per exec


def test_memory_quota_is_what_the_program_sees(backend: SandboxManager, limited: Sandbox) -> None:
    want = LIMITED.memory_mb << 20
    r = run(backend, limited, shell="cat /sys/fs/cgroup/memory.max 2>/dev/null ||"
            " cat /sys/fs/cgroup/memory/memory.limit_in_bytes")  # fmt: skip
    assert int(r.stdout) == want
    if backend.runtime == "runsc":  # the sentry's own kernel: its total memory is the quota
        meminfo = run(backend, limited, argv=["head", "-1", "/proc/meminfo"]).stdout
        assert meminfo.split()[1:] == [str(want >> 10), "kB"]


@pytest.mark.parametrize("mb", [LIMITED.memory_mb // 2, LIMITED.memory_mb + 100, 2048])
def test_memory_quota_is_exact(backend: SandboxManager, limited: Sandbox, mb: int) -> None:
    """Within the quota an allocation succeeds; beyond it (even far beyond, where
    gVisor's host limit would kill the whole sandbox) it is an OOM kill of the
    program alone, and the sandbox serves the next exec."""
    r = run(backend, limited, python=f"b = b'x' * ({mb} << 20); print('ok')", timeout_s=20)
    if mb < LIMITED.memory_mb:
        assert r.exit_code == 0 and r.stdout == "ok\n" and not r.oom_killed
    else:
        assert r.oom_killed and r.signal == 9 and not r.timed_out
    assert run(backend, limited, argv=["echo", "alive"]).stdout == "alive\n"


def test_huge_output_is_capped(backend: SandboxManager, limited: Sandbox) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = run(backend, limited, shell="head -c 200000000 /dev/zero | tr '\\0' x", timeout_s=30)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.exit_code == 0 and r.stdout_truncated and len(r.stdout) == 1 << 20
    assert grown_mb < 48, f"worker peak RSS grew {grown_mb:.0f} MB"
    # the agent kept only the cap: its peak RSS (gVisor has no VmHWM: current RSS)
    status = run(backend, limited, argv=["cat", "/proc/1/status"]).stdout
    vm = dict(line.split(":", 1) for line in status.splitlines() if line.startswith("Vm"))
    assert int(vm.get("VmHWM", vm["VmRSS"]).split()[0]) < 96 * 1024, vm


def test_workspace_full(backend: SandboxManager, limited: Sandbox) -> None:
    r = run(backend, limited, shell="dd if=/dev/zero of=fill bs=1M count=64", timeout_s=20)
    assert r.exit_code != 0 and "No space left on device" in r.stderr and r.workspace_full
    r = run(backend, limited, shell="rm fill; echo ok")
    assert r.stdout == "ok\n" and not r.workspace_full


def test_cpu_quota(backend: SandboxManager, limited: Sandbox) -> None:
    code = (
        "import os, time\n"
        "t0, c0 = time.monotonic(), sum(os.times()[:2])\n"
        "while time.monotonic() - t0 < 1.5: pass\n"
        "print((sum(os.times()[:2]) - c0) / (time.monotonic() - t0))"
    )
    share = float(run(backend, limited, python=code).stdout)
    assert 0.3 <= share <= 0.7, f"used {share:.2f} of a core under cpus=0.5"


def test_deadline_holds_when_the_agent_cannot_answer(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    """A frozen sandbox (its agent too) still meets the deadline: the worker
    destroys it, every process in it ends, and the call returns timed out."""
    import docker

    if backend.runtime == "runsc":
        pytest.skip("runsc cannot force-remove a paused container, so pause cannot freeze it here")
    sbx = sandbox_factory()
    docker.from_env().api.pause(sbx.id)
    t0 = time.monotonic()
    r = run(backend, sbx, argv=["sleep", "30"], timeout_s=1)
    assert r.timed_out and r.exit_code is None and time.monotonic() - t0 < 1 + 1.5
    assert sbx.state == "destroyed"
    wait_gone(backend, sbx)  # killed at once, removed in the background
