"""The launcher starts user commands exactly as the forking ``Popen(user=1000)`` did.

Real processes on the host: the launcher host needs root (to become uid 1000
and back), so these run where the tests run as root, as in CI. The same code
under gVisor and runc is covered by tests/integration/test_launcher_contract.py
and the agent contract suite.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.agent import processes
from worker.agent.errors import AgentError
from worker.agent.launcher import LaunchedPopen, Launcher
from worker.agent.reaper import REAPER

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the launcher host needs root")

ENV = {"PATH": "/usr/bin:/bin", "FOO": "bar"}
IO = {"stdin": subprocess.DEVNULL, "stderr": subprocess.PIPE}  # as an exec without stdin


def _ready(one: Launcher) -> Launcher:
    one._wanted = True  # as after a first spawn
    one.prepare()
    end = time.monotonic() + 20
    while not one.usable():
        assert time.monotonic() < end, "the launcher host never said it was ready"
        time.sleep(0.01)
    return one


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    one = _ready(Launcher())
    yield one
    host = one._host
    one.stop()
    if host is not None:
        os.waitpid(host.pid, 0)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory uid 1000 can enter (pytest's tmp_path is root's, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="sg-launcher-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


def _start(one: Launcher, argv: list[str], cwd: str = "/", stdin: bool = False) -> LaunchedPopen:
    with REAPER.cond:  # as processes.spawn: the status must find the pid wanted
        proc = one.popen(
            argv, ENV, cwd, **{**IO, "stdin": subprocess.PIPE if stdin else subprocess.DEVNULL}
        )
        REAPER.wanted.add(proc.pid)
    assert isinstance(proc, LaunchedPopen)
    return proc


def _run(proc: subprocess.Popen[bytes], stdin: bytes | None = None) -> tuple[int, str, str]:
    """Exit code (from the host's report, the reaper's way), stdout, stderr."""
    if stdin is not None and proc.stdin is not None:
        proc.stdin.write(stdin)
        proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    status = REAPER.wait(proc.pid, 20)
    assert status is not None, "the host never reported the exit"
    return os.waitstatus_to_exitcode(status), out.decode(), err.decode()


def test_command_runs_as_user_in_own_session_with_env_cwd_stdin(
    launcher: Launcher, shared_dir: Path
) -> None:
    script = (
        "id -u; id -g; id -G; pwd; echo $FOO; cat; "
        "grep -E '^(SigBlk|CapPrm|CapEff)' /proc/self/status; "
        "read -r a b c d e f rest < /proc/self/stat; echo $a $e $f; ls /proc/self/fd"
    )
    proc = _start(launcher, ["sh", "-c", script], str(shared_dir), True)
    code, out, err = _run(proc, b"from stdin\n")
    lines = out.split("\n")
    assert code == 0, err
    assert lines[:6] == ["1000", "1000", "1000", str(shared_dir), "bar", "from stdin"]
    assert "SigBlk:\t0000000000000000" in out
    assert "CapPrm:\t0000000000000000" in out and "CapEff:\t0000000000000000" in out
    pid, pgid, sid = lines[9].split()
    assert pid == pgid == sid == str(proc.pid)  # a new session: the deadline kill takes it all
    assert lines[10:14] == ["0", "1", "2", "3"]  # ls's own directory fd is 3: nothing leaked


def test_stdin_not_used_is_devnull(launcher: Launcher) -> None:
    proc = _start(launcher, ["cat"])
    assert proc.stdin is None
    assert _run(proc) == (0, "", "")


def test_exit_code_and_signal_are_the_commands(launcher: Launcher) -> None:
    assert _run(_start(launcher, ["sh", "-c", "exit 3"]))[0] == 3
    assert _run(_start(launcher, ["sh", "-c", "kill -TERM $$"]))[0] == -signal.SIGTERM


def test_host_is_root_between_launches(launcher: Launcher) -> None:
    _run(_start(launcher, ["true"]))
    assert launcher._host is not None
    status = Path(f"/proc/{launcher._host.pid}/status").read_text()
    assert "Uid:\t0\t0\t0\t0" in status and "Gid:\t0\t0\t0\t0" in status


def _popen_error(argv: list[str], cwd: str) -> OSError:
    """The error the forking ``Popen(user=1000)`` raised for the same spawn."""
    with pytest.raises(OSError) as caught:
        subprocess.Popen(
            argv, env=ENV, cwd=cwd, user=1000, group=1000, extra_groups=[], close_fds=True
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
    want = _popen_error(argv, str(shared_dir))
    with pytest.raises(OSError) as caught:
        launcher.popen(argv, ENV, str(shared_dir), **IO)
    assert type(caught.value) is type(want)
    assert (caught.value.errno, caught.value.strerror) == (want.errno, want.strerror)
    assert launcher.usable()  # a spawn error is the command's, the host serves on


def test_path_search_skips_what_cannot_run(launcher: Launcher, shared_dir: Path) -> None:
    """As execvpe: a non-executable first match is passed over for a later one."""
    for name, mode in (("a", 0o644), ("b", 0o755)):
        (shared_dir / name).mkdir(mode=0o755)
        tool = shared_dir / name / "tool"
        tool.write_text(f"#!/bin/sh\necho {name}\n")
        tool.chmod(mode)
    path = f"{shared_dir}/missing:{shared_dir}/a:{shared_dir}/b:/usr/bin:/bin"
    with REAPER.cond:
        proc = launcher.popen(["tool"], {"PATH": path}, "/", **IO)
        REAPER.wanted.add(proc.pid)
    assert _run(proc) == (0, "b\n", "")
    (shared_dir / "b" / "tool").chmod(0o644)
    with pytest.raises(PermissionError):
        launcher.popen(["tool"], {"PATH": path}, "/", **IO)


def test_a_dead_host_means_fork_then_a_new_host(launcher: Launcher) -> None:
    """The user may kill the host while it holds their uid: the next spawn forks."""
    old = launcher._host
    assert old is not None
    os.kill(old.pid, signal.SIGKILL)
    os.waitpid(old.pid, 0)
    proc = launcher.popen(["sh", "-c", "id -u"], ENV, "/", **IO)
    assert type(proc) is subprocess.Popen  # forked, as before the launcher
    out, _ = proc.communicate(timeout=20)
    assert (proc.returncode, out) == (0, b"1000\n")
    assert launcher._host is None  # started between requests, never on an exec's path
    launcher.prepare()
    assert launcher._host is not None
    _ready(launcher)
    assert launcher._host is not None and launcher._host.pid != old.pid
    assert _run(_start(launcher, ["sh", "-c", "echo again"])) == (0, "again\n", "")


def test_host_dying_after_the_request_fails_the_exec(launcher: Launcher) -> None:
    """Given the command, the host may have started it: no second start, an error."""
    ours, fake = socket.socketpair()
    launcher.stop()
    launcher._sock, launcher._ready = ours, True
    threading.Timer(0.2, fake.close).start()  # a host that dies with the request unanswered
    with pytest.raises(AgentError) as caught:
        launcher.launch(["true"], ENV, "/", [])
    assert caught.value.code == "sandbox_error"
    assert not launcher.usable()  # until a new host is ready, spawns fork


def test_without_root_it_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    one = Launcher()
    monkeypatch.setattr(one, "enabled", False)
    one.prepare()
    assert not one.usable() and one._host is None
    proc = one.popen(["sh", "-c", "id -u; echo $FOO"], ENV, "/", **IO)
    assert type(proc) is subprocess.Popen
    out, _ = proc.communicate(timeout=20)
    assert out == b"1000\nbar\n"


def test_host_is_not_counted_as_a_user_task(
    launcher: Launcher, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The deadline kill's fast path waits for zero tasks besides the agent's."""
    assert launcher.tasks() == 1
    count = tmp_path / "pids.current"
    count.write_text("500\n")
    monkeypatch.setattr(processes, "LAUNCHER", launcher)
    monkeypatch.setattr(processes, "PIDS_CURRENT_FILE", str(count))
    threads = len(os.listdir("/proc/self/task"))
    assert processes.tasks_besides_agent() == 500 - threads - 1


def test_a_pool_sandbox_gets_its_host_before_its_first_command() -> None:
    """Issue 22.3: the pool's ``warm`` ping has the host started ahead, so the
    session's first command is spawned by it, not forked."""
    one = Launcher()
    try:
        assert one.warm(wait_s=20) is True  # what ``ping`` with ``warm`` does
        assert one._host is not None and one.usable()
        proc = one.popen(["true"], ENV, "/", **IO)
        assert isinstance(proc, LaunchedPopen) and proc.wait(timeout=20) == 0
    finally:
        host = one._host
        one.stop()
        if host is not None:
            os.waitpid(host.pid, 0)


def test_host_starts_only_once_a_command_was_started() -> None:
    one = Launcher()
    one.prepare()  # e.g. after the first ping of a sandbox made for a session
    assert one._host is None
    proc = one.popen(["true"], ENV, "/", **IO)  # forks: no host yet
    assert type(proc) is subprocess.Popen and proc.wait(timeout=20) == 0
    one.prepare()
    try:
        assert one._host is not None and one.pid() == one._host.pid
        assert str(one._host.pid) not in {str(pid) for pid, _ in processes.user_procs()}
    finally:
        host = one._host
        one.stop()
        if host is not None:
            os.waitpid(host.pid, 0)
