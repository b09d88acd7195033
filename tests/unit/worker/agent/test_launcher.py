"""The launcher starts user commands exactly as the forking ``Popen(user=1000)`` did.

Real processes on the host: the launcher needs root (to become uid 1000 and
back), so these run where the tests run as root, as in CI; the fallback test
runs anywhere. The same code under gVisor and runc is covered by the agent
contract suite (tests/integration/test_backend_contract.py).
"""

from __future__ import annotations

import errno
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.agent import launcher as launcher_mod
from worker.agent.launcher import Launcher, UserPopen

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the launcher needs root")

ENV = {"PATH": "/usr/bin:/bin", "FOO": "bar"}


@pytest.fixture
def launcher() -> Launcher:
    one = Launcher()
    assert one.start(), "the launcher thread should start as root on Linux"
    return one


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory uid 1000 can enter (pytest's tmp_path is root's, mode 0700)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sg-launcher-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


def _run(proc: subprocess.Popen[bytes], stdin: bytes | None = None) -> tuple[int, str, str]:
    out, err = proc.communicate(stdin, timeout=30)
    return proc.returncode, out.decode(), err.decode()


def test_command_runs_as_user_in_own_session_with_env_cwd_stdin(
    launcher: Launcher, shared_dir: Path
) -> None:
    script = (
        "id -u; id -g; id -G; pwd; echo $FOO; cat; "
        "grep -E '^(SigBlk|CapPrm|CapEff)' /proc/self/status; "
        "read -r a b c d e f rest < /proc/self/stat; echo $a $e $f; ls /proc/self/fd"
    )
    proc = launcher.popen(["sh", "-c", script], ENV, str(shared_dir), True)
    code, out, err = _run(proc, b"from stdin\n")
    lines = out.split("\n")
    assert code == 0, err
    assert lines[:6] == ["1000", "1000", "1000", str(shared_dir), "bar", "from stdin"]
    assert "SigBlk:\t0000000000000000" in out  # the launcher thread blocks all; the child none
    assert "CapPrm:\t0000000000000000" in out and "CapEff:\t0000000000000000" in out
    pid, pgid, sid = lines[9].split()
    assert pid == pgid == sid == str(proc.pid)  # a new session: the deadline kill takes it all
    assert lines[10:14] == ["0", "1", "2", "3"]  # ls's own directory fd is 3: nothing leaked


def test_stdin_not_used_is_devnull(launcher: Launcher) -> None:
    proc = launcher.popen(["cat"], ENV, "/", False)
    assert proc.stdin is None
    assert _run(proc) == (0, "", "")


def test_exit_code_and_signal_are_the_commands(launcher: Launcher) -> None:
    assert _run(launcher.popen(["sh", "-c", "exit 3"], ENV, "/", False))[0] == 3
    assert _run(launcher.popen(["sh", "-c", "kill -TERM $$"], ENV, "/", False))[0] == -15


def _popen_error(argv: list[str], env: dict[str, str], cwd: str) -> OSError:
    """The error the forking ``Popen(user=1000)`` raised for the same spawn."""
    with pytest.raises(OSError) as caught:
        subprocess.Popen(
            argv, env=env, cwd=cwd, user=1000, group=1000, extra_groups=[], close_fds=True
        )
    return caught.value


@pytest.mark.parametrize("kind", ["missing", "missing_path", "not_executable", "no_format"])
def test_spawn_errors_are_popens(launcher: Launcher, shared_dir: Path, kind: str) -> None:
    (shared_dir / "data").write_text("plain text\n")
    (shared_dir / "data").chmod(0o644)
    (shared_dir / "noformat").write_bytes(b"\x00\x01\x02\x03")
    (shared_dir / "noformat").chmod(0o755)
    argv = {
        "missing": ["no-such-command-anywhere"],
        "missing_path": [str(shared_dir / "nope")],
        "not_executable": [str(shared_dir / "data")],
        "no_format": [str(shared_dir / "noformat")],
    }[kind]
    want = _popen_error(argv, ENV, str(shared_dir))
    with pytest.raises(OSError) as caught:
        launcher.popen(argv, ENV, str(shared_dir), False)
    assert type(caught.value) is type(want)
    assert (caught.value.errno, caught.value.strerror) == (want.errno, want.strerror)


def test_path_search_skips_what_cannot_run(launcher: Launcher, shared_dir: Path) -> None:
    """As execvpe: a non-executable first match is passed over for a later one."""
    for name, mode in (("a", 0o644), ("b", 0o755)):
        (shared_dir / name).mkdir(mode=0o755)
        tool = shared_dir / name / "tool"
        tool.write_text(f"#!/bin/sh\necho {name}\n")
        tool.chmod(mode)
    env = {"PATH": f"{shared_dir}/missing:{shared_dir}/a:{shared_dir}/b:/usr/bin:/bin"}
    assert _run(launcher.popen(["tool"], env, "/", False)) == (0, "b\n", "")
    (shared_dir / "b" / "tool").chmod(0o644)
    with pytest.raises(PermissionError):
        launcher.popen(["tool"], env, "/", False)


def test_thread_holds_the_user_only_while_it_launches(launcher: Launcher) -> None:
    """In the window: uid 1000 with saved uid 0 (refuses ptrace); after it: root again."""
    inside = launcher._call(lambda: (os.getresuid(), os.getresgid(), os.getgroups()))
    assert inside == ((1000, 1000, 0), (1000, 1000, 1000), [])
    assert os.getresuid() == (0, 0, 0)  # this thread never changed
    after = launcher._call(lambda: threading.current_thread().name)
    assert after == "launcher"


def test_user_cannot_ptrace_or_signal_the_launcher_thread(launcher: Launcher) -> None:
    """A user process started in the window tries PTRACE_ATTACH and SIGTERM on it."""
    probe = (
        "import ctypes, os, signal, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "tid = int(sys.argv[1])\n"
        "rc = libc.ptrace(16, tid, 0, 0)\n"  # PTRACE_ATTACH
        "print(rc, ctypes.get_errno())\n"
        "libc.syscall(234, os.getppid(), tid, signal.SIGTERM)\n"  # tgkill (x86_64)
    )

    def in_window() -> str:
        tid = threading.get_native_id()
        proc = UserPopen(
            [sys.executable, "-I", "-c", probe, str(tid)],
            stdout=subprocess.PIPE,
            env=ENV,
        )
        out, _ = proc.communicate(timeout=30)
        return out.decode()

    if platform.machine() != "x86_64":
        pytest.skip("the probe's tgkill number is x86_64's")
    out = launcher._call(in_window)
    assert out is not None
    rc, err = out.split()
    assert (int(rc), int(err)) == (-1, errno.EPERM)
    # the SIGTERM, if the kernel let it through, stays pending on the blocked thread:
    assert launcher._call(lambda: os.getpid()) == os.getpid()  # the thread still serves


def test_falls_back_to_forking_popen_when_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launcher_mod, "SYSCALLS", {})
    one = Launcher()
    assert not one.start()
    proc = one.popen(["sh", "-c", "id -u; echo $FOO"], ENV, "/", False)
    assert type(proc) is subprocess.Popen
    assert _run(proc) == (0, "1000\nbar\n", "")
