"""The agent's launcher host on each real runtime (runc, runsc): docs/agent-protocol.md, "exec".

Exec goes through the host once it is ready; the host is root between
launches; a user who races to kill (or ``prlimit``) it while it holds their
uid costs at most a fork (or one exec's ``sandbox_error``), never the agent,
and never changes a later command's limits.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sandgrid.errors import SandboxError
from sandgrid.models import ExecRequest, FileWrite
from worker.ops.exec import exec_command
from worker.ops.files import write_files
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration

SPAM = """
import ctypes, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class Limit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
done = {"kill": 0, "ptrace": 0, "prlimit": 0, "seen": 0}
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"launcherhost" not in f.read():
                    continue
        except (OSError, ValueError):
            continue
        pid = int(name)
        done["seen"] += 1
        if libc.ptrace(16, pid, 0, 0) == 0:  # maybe the user's own command by now
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                still = b"launcherhost" in f.read()
            with open(f"/proc/{pid}/status") as f:
                uids = next(ln for ln in f if ln.startswith("Uid:")).split()[1:]
            done["ptrace"] += still or "0" in uids  # a privileged process traced
            libc.ptrace(17, pid, 0, 0)
        lim = Limit(1, 1)
        if libc.prlimit(pid, 7, ctypes.byref(lim), None) == 0:
            done["prlimit"] += 1
        try:
            os.kill(pid, signal.SIGKILL)
            done["kill"] += 1
        except OSError:
            pass
with open("spam.tmp", "w") as f:
    json.dump(done, f)
os.rename("spam.tmp", "spam.json")
"""


def run(backend: SandboxManager, sbx: Sandbox, **kw: Any) -> Any:
    return exec_command(backend, sbx, ExecRequest(**kw))


def host_parent(backend: SandboxManager, sbx: Sandbox) -> str:
    """``ps`` of the exec's parent once the launcher host starts execs (not PID 1)."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        r = run(backend, sbx, shell='[ "$PPID" != 1 ] && ps -o user=,args= -p $PPID')
        if r.exit_code == 0:
            return str(r.stdout)
        time.sleep(0.05)
    raise AssertionError("no exec was started by the launcher host within 20 s")


def test_exec_goes_through_a_root_launcher_host(backend: SandboxManager, shared: Sandbox) -> None:
    parent = host_parent(backend, shared)
    assert parent.split()[0] == "root" and "-m sandgrid_agent.launcherhost" in parent
    r = run(backend, shared, shell="id -u; ls /proc/self/fd; echo $FOO", env={"FOO": "x"})
    assert r.stdout == "1000\n0\n1\n2\n3\nx\n"
    r = run(backend, shared, argv=["no-such-command"])
    assert (
        r.exit_code == 127 and r.stderr == "sandgrid: no-such-command: No such file or directory\n"
    )
    r = run(backend, shared, shell="read -r a b c d e f rest < /proc/self/stat; echo $a $e $f")
    pid, pgid, sid = r.stdout.split()
    assert pid == pgid == sid  # its own session: the deadline kill and cancel take it all


def test_a_program_posix_spawn_refuses_fails_that_exec_not_the_launcher(
    backend: SandboxManager, shared: Sandbox
) -> None:
    """An empty program name made ``posix_spawn`` raise ``ValueError``, which killed the
    host: a background start answered 500 ``sandbox_error`` (issue 23.12). The API
    refuses it now (422); the host answers ``EINVAL`` for it and keeps serving."""
    host_parent(backend, shared)
    before = run(backend, shared, shell="echo $PPID").stdout
    r = exec_command(backend, shared, ExecRequest.model_construct(argv=[""]))
    assert r.exit_code in (126, 127) and "Invalid argument" in r.stderr, r
    assert run(backend, shared, shell="echo $PPID").stdout == before  # the same host


def test_a_timed_out_exec_leaves_no_launcher_until_the_next_command(
    backend: SandboxManager, shared: Sandbox
) -> None:
    """After a deadline kill the sandbox holds the agent and the user's processes only."""
    host_parent(backend, shared)
    assert run(backend, shared, argv=["sleep", "10"], timeout_s=0.5).timed_out
    backend.ping(shared)  # a request that starts no command starts no host either
    ps = run(backend, shared, argv=["ps", "-e", "-o", "args="]).stdout.splitlines()
    assert ps == ["python3 -I -S /opt/sandgrid/agent.py", "ps -e -o args="]
    host_parent(backend, shared)  # and then it is back


def test_user_racing_to_kill_the_launcher_costs_only_a_fork(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    sbx = sandbox_factory()
    host_parent(backend, sbx)
    limits = run(backend, sbx, shell="ulimit -a; nice").stdout
    write_files(backend, sbx, [FileWrite(path="spam.py", content=SPAM)])
    run(backend, sbx, shell="python3 spam.py 3 > spam.log 2>&1 &")
    outcomes = {"ok": 0, "killed by the user": 0, "launcher died": 0}
    end = time.monotonic() + 3.5
    while time.monotonic() < end:
        try:
            r = run(backend, sbx, shell="echo $$")
            if r.exit_code is None:  # spawned, not yet exec'd: it still showed the host's name
                outcomes["killed by the user"] += 1
                continue
            assert r.exit_code == 0 and r.stdout.strip().isdigit(), r
            outcomes["ok"] += 1
        except SandboxError as exc:
            assert "launcher died" in str(exc)
            outcomes["launcher died"] += 1
    for _ in range(100):
        if run(backend, sbx, shell="cat spam.json 2>/dev/null").stdout:
            break
        time.sleep(0.1)
    done = json.loads(run(backend, sbx, shell="cat spam.json").stdout)
    assert done["seen"] > 0  # the user did see the host, and tried
    assert done["ptrace"] == 0, done  # gVisor lets prlimit through in the window: see below
    backend.ping(sbx)
    assert run(backend, sbx, shell="echo alive").stdout == "alive\n"
    host_parent(backend, sbx)
    assert run(backend, sbx, shell="ulimit -a; nice").stdout == limits  # never inherited
    assert outcomes["ok"] > 0, outcomes


def test_a_command_killing_all_it_may_never_kills_the_launcher(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    """``kill -9 -1`` (a batch lane's reset) right as the host spawned it: the host lives on.

    The host held the user's uid while it spawned; a signal to the process is
    checked against its main thread, which stays root (launcherhost.py).
    """
    sbx = sandbox_factory()
    host = host_parent(backend, sbx)
    hosts = set()
    for _ in range(60):
        r = run(backend, sbx, shell="kill -9 -1; ps -o pid=,user=,args= -p $PPID")
        assert r.exit_code == 0, r
        hosts.add(r.stdout.split()[0])
    assert len(hosts) == 1 and "launcherhost" in host, (hosts, host)
    assert run(backend, sbx, shell="echo alive").stdout == "alive\n"
