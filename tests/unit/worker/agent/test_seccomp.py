"""The agent's seccomp filter refuses user namespaces and leaves threads and fork alone.

The filter is permanent, so it is installed in a fresh interpreter.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from worker.agent.seccomp import SYSCALLS, filter_program

ROOT = Path(__file__).resolve().parents[4]

PROBE = """
import ctypes, os, threading
from worker.agent.seccomp import deny_user_namespaces
libc = ctypes.CDLL(None, use_errno=True)
assert deny_user_namespaces()
print(libc.unshare(0x10000000), ctypes.get_errno())  # CLONE_NEWUSER
print(libc.syscall(435, 0, 0), ctypes.get_errno())  # clone3
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_program_per_machine() -> None:
    assert filter_program("sparc") == []
    for machine in SYSCALLS:
        program = filter_program(machine)
        assert len(program) == 13
        for i, (code, jt, jf, _) in enumerate(program):  # every jump lands inside
            if code == 0x15:
                assert i + 1 + max(jt, jf) < len(program)


@pytest.mark.skipif(platform.machine() not in SYSCALLS, reason="no filter for this machine")
def test_user_namespaces_refused_threads_work() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:4] == ["-1 1", "-1 38", "thread", "7"]  # EPERM, ENOSYS
