"""The scan walks on PID 1's thread acting as the user (worker/agent/threadcreds.py),
on each real runtime (runc, runsc).

While it does, the thread's effective ids are the user's and its real and saved
ids root's: a user's process that aims ``kill``, ``tgkill``, ``prlimit`` and
``ptrace`` at every task of PID 1 the whole time gets none through, the scans
stay right, and no later command inherits a changed limit.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sandgrid.models import ExecRequest, FileWrite
from worker.ops.exec import exec_command
from worker.ops.files import write_files
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration

ROOTS = ["/workspace", "/home/sandbox"]

SPAM = """
import ctypes, json, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class Limit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_ulong), ("max", ctypes.c_ulong)]
got = {"tries": 0, "kill": 0, "tgkill": 0, "prlimit": 0, "ptrace": 0}
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for name in os.listdir("/proc/1/task"):
        tid = int(name)
        got["tries"] += 1
        try:
            os.kill(tid, 0)
            got["kill"] += 1
        except OSError:
            pass
        got["tgkill"] += libc.syscall(234, 1, tid, 0) == 0
        lim = Limit(5, 5)
        got["prlimit"] += libc.prlimit(tid, 7, ctypes.byref(lim), None) == 0
        if libc.ptrace(16, tid, 0, 0) == 0:
            got["ptrace"] += 1
            libc.ptrace(17, tid, 0, 0)
with open("spam.tmp", "w") as f:
    json.dump(got, f)
os.rename("spam.tmp", "spam.json")
"""


def run(backend: SandboxManager, sbx: Sandbox, shell: str) -> Any:
    return exec_command(backend, sbx, ExecRequest(shell=shell))


def test_a_user_aiming_at_pid_1_during_scans_gets_nothing_through(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    sbx = sandbox_factory()
    files = [FileWrite(path=f"tree/f{i}.txt", content=f"{i}\n" * 50) for i in range(200)]
    write_files(backend, sbx, [*files, FileWrite(path="spam.py", content=SPAM)])
    limits = run(backend, sbx, "ulimit -a; nice").stdout
    run(backend, sbx, "python3 spam.py 3 > spam.log 2>&1 &")
    scans, end = 0, time.monotonic() + 3.5
    while time.monotonic() < end:
        run(backend, sbx, f"echo {scans} > tree/moving.txt")
        rows = {row[0]: row for row in backend.files.scan(sbx, ROOTS)}
        assert "/workspace/tree/f199.txt" in rows and "/workspace/tree/moving.txt" in rows
        scans += 1
    for _ in range(100):
        if run(backend, sbx, "cat spam.json 2>/dev/null").stdout:
            break
        time.sleep(0.1)
    got = json.loads(run(backend, sbx, "cat spam.json").stdout)
    assert got["tries"] > 0 and scans > 0
    assert {k: v for k, v in got.items() if k != "tries"} == {
        "kill": 0,
        "tgkill": 0,
        "prlimit": 0,
        "ptrace": 0,
    }, got
    backend.ping(sbx)
    assert run(backend, sbx, "ulimit -a; nice").stdout == limits


def test_the_scan_reads_what_the_user_may_read_only(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    """A file the user closed (mode 200) is read as its owner may, and left closed."""
    sbx = sandbox_factory()
    run(backend, sbx, "echo closed > closed.txt && chmod 200 closed.txt")
    rows = {row[0]: row for row in backend.files.scan(sbx, ROOTS)}
    assert rows["/workspace/closed.txt"][3] == 7
    assert run(backend, sbx, "stat -c %a closed.txt").stdout == "200\n"
