"""The runtime contract: what every registered runtime keeps, through ``SandboxManager``.

Run against each runtime of ``worker.runtimes.RUNTIMES`` (runc, runsc today; the
``backend`` fixture of ``conftest.py``); a new runtime passes it unchanged
(docs/architecture.md, "A new runtime"). This file holds the command: exec, its
deadline, its cancel; ``test_files_contract.py`` the workspace's files and
snapshots, ``test_isolation_contract.py`` what the user cannot do.

Most tests share one sandbox per runtime (creating one is the slow part); the
tests that break or fill a sandbox make their own.
"""

from __future__ import annotations

import threading
import time

import pytest

from sandgrid.errors import ErrorCode, InvalidInput
from sandgrid.models import ExecRequest, FileWrite
from tests.support.sandbox_calls import run
from worker.ops.exec import exec_command
from worker.ops.files import write_files
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration


# ---- exec ----------------------------------------------------------------------


def test_exec_argv_shell_python(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, argv=["echo", "a b", "c"])
    assert (r.exit_code, r.stdout, r.stderr) == (0, "a b c\n", "")
    r = run(backend, shared, shell="echo out; echo err >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n", "err\n")
    r = run(backend, shared, python="import sys; print(sys.version_info[:2]); sys.exit(3)")
    assert (r.exit_code, r.stdout) == (3, "(3, 11)\n")
    assert r.node == backend.node and r.duration_ms > 0 and not r.timed_out


def test_exec_large_python_source(backend: SandboxManager, shared: Sandbox) -> None:
    source = "x = 1\n" * 50_000 + "print(x + 1)\n"  # 300 kB: over one argv string's limit
    assert run(backend, shared, python=source).stdout == "2\n"


def test_exec_env_cwd_stdin(backend: SandboxManager, shared: Sandbox) -> None:
    write_files(backend, shared, [FileWrite(path="sub/dir/f.txt", content="x")])
    r = run(backend, shared, shell="echo $FOO $HOME; pwd; cat", env={"FOO": "bar"}, cwd="sub/dir",
            stdin="from stdin")  # fmt: skip
    assert r.stdout == "bar /home/sandbox\n/workspace/sub/dir\nfrom stdin"
    big = "y" * 300_000  # more than a pipe buffer: stdin is fed while output is read
    assert len(run(backend, shared, argv=["cat"], stdin=big).stdout) == 300_000


def test_exec_missing_command(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, argv=["no-such-command"])
    assert r.exit_code == 127 and "no-such-command" in r.stderr


def test_exec_cwd_outside_workspace(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="ln -sfn /etc /workspace/etc-link")
    with pytest.raises(InvalidInput) as err:
        run(backend, shared, argv=["pwd"], cwd="etc-link")
    assert err.value.code == ErrorCode.PATH_OUTSIDE_WORKSPACE


def test_output_cap_and_truncation(backend: SandboxManager, shared: Sandbox) -> None:
    cap = shared.quotas.output_bytes
    r = run(backend, shared, shell=f"head -c {cap + 5000} /dev/zero | tr '\\0' a; echo e >&2")
    assert len(r.stdout) == cap and r.stdout_truncated and not r.stderr_truncated
    assert r.stderr == "e\n" and r.exit_code == 0


def test_streaming_chunks(backend: SandboxManager, shared: Sandbox) -> None:
    seen: list[tuple[str, str, float]] = []
    t0 = time.monotonic()
    r = exec_command(
        backend,
        shared,
        ExecRequest(shell="echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three"),
        on_chunk=lambda stream, text: seen.append((stream, text, time.monotonic() - t0)),
    )
    assert "".join(t for s, t, _ in seen if s == "stdout") == r.stdout == "one\nthree\n"
    assert "".join(t for s, t, _ in seen if s == "stderr") == "two\n"
    assert seen[0][2] < 0.25  # the first chunk came while the command still ran


def test_signal_reported(backend: SandboxManager, shared: Sandbox) -> None:
    r = run(backend, shared, shell="kill -TERM $$")
    assert r.exit_code is None and r.signal == 15 and not r.oom_killed


# ---- the deadline ----------------------------------------------------------------


def test_deadline_kills_everything(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="sleep 1000 > /dev/null 2>&1 &")  # earlier, not this exec's
    t0 = time.monotonic()
    r = run(backend, shared, shell="sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; sleep 1000",
            timeout_s=1)  # fmt: skip
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.exit_code is None and r.signal == 9
    assert 1.0 <= elapsed < 2.0
    ps = run(backend, shared, argv=["ps", "-eo", "pid,ppid,user,stat,args"]).stdout
    sleeps = [line for line in ps.splitlines() if "sleep 1000" in line]
    assert len(sleeps) == 1, ps  # only the one started before this exec
    run(backend, shared, shell="pkill -x sleep; true")


def test_background_process_survives_normal_exit(backend: SandboxManager, shared: Sandbox) -> None:
    t0 = time.monotonic()
    r = run(backend, shared, shell="sleep 30 & echo started")
    assert r.exit_code == 0 and r.stdout == "started\n" and time.monotonic() - t0 < 2
    assert "sleep 30" in run(backend, shared, argv=["ps", "-eo", "args"]).stdout
    run(backend, shared, shell="pkill -x sleep; true")


# ---- cancel (a notification on the channel while the exec runs) -------------------


def _cancel_when_started(sbx: Sandbox, started: threading.Event) -> None:
    """Wait for the exec's first chunk, then cancel the request in flight."""
    assert started.wait(30)
    assert sbx.channel is not None and sbx.channel.in_flight is not None
    [(frame_id, (op, _))] = sbx.channel.in_flight.items()
    assert op == "exec"
    sbx.channel.notify("cancel", {"target": frame_id})


def test_cancel_kills_every_process_of_the_exec(backend: SandboxManager, shared: Sandbox) -> None:
    run(backend, shared, shell="sleep 1000 > /dev/null 2>&1 &")  # earlier, not this exec's
    started = threading.Event()
    canceller = threading.Thread(target=_cancel_when_started, args=(shared, started))
    canceller.start()
    r = exec_command(
        backend,
        shared,
        ExecRequest(
            shell="sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; echo started; sleep 1000",
            timeout_s=60,
        ),
        on_chunk=lambda stream, text: started.set(),
    )
    canceller.join()
    assert r.cancelled and not r.timed_out and r.exit_code is None and r.signal == 9
    assert not r.oom_killed and r.stdout == "started\n"
    ps = run(backend, shared, argv=["ps", "-eo", "pid,ppid,user,stat,args"]).stdout
    sleeps = [line for line in ps.splitlines() if "sleep 1000" in line]
    assert len(sleeps) == 1, ps  # only the one started before this exec
    run(backend, shared, shell="pkill -x sleep; true")


def test_cancel_of_another_request_or_none_is_a_no_op(
    backend: SandboxManager, shared: Sandbox
) -> None:
    assert shared.channel is not None
    shared.channel.notify("cancel", {"target": 999_999})  # no exec runs: no reply either
    r = run(backend, shared, shell="echo still here")
    assert r.stdout == "still here\n" and not r.cancelled
    started = threading.Event()

    def wrong_target() -> None:
        assert started.wait(30) and shared.channel is not None
        shared.channel.notify("cancel", {"target": -1})

    t = threading.Thread(target=wrong_target)
    t.start()
    r = exec_command(
        backend,
        shared,
        ExecRequest(shell="echo a; sleep 0.5; echo b"),
        on_chunk=lambda stream, text: started.set(),
    )
    t.join()
    assert r.stdout == "a\nb\n" and r.exit_code == 0 and not r.cancelled
