"""The contract of background processes, on each real runtime (runc, runsc).

A part of the backend contract suite (``test_backend_contract.py``), in its own
module for its size: the same ``backend`` fixture runs it on both runtimes.
"""

from __future__ import annotations

import time

import pytest

from sandgrid.errors import LimitExceeded, NotFound
from sandgrid.models import ExecRequest, Quotas
from tests.integration.conftest import SandboxFactory
from worker.ops.exec import exec_command
from worker.ops.processes import (
    live_processes,
    process_kill,
    process_logs,
    process_stdin,
    process_wait,
    processes,
    start_process,
)
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration


def start(backend: SandboxManager, sbx: Sandbox, **kw: object) -> int:
    return start_process(backend, sbx, ExecRequest.model_validate(kw)).pid


def test_start_answers_at_once_then_wait_and_logs(backend: SandboxManager, shared: Sandbox) -> None:
    info = start_process(
        backend, shared, ExecRequest(shell="echo one; echo two >&2; sleep 2; echo three; exit 4")
    )
    assert info.running and info.sandbox == shared.id and info.pid > 1
    assert process_wait(backend, shared, info.pid, 0).running  # still sleeping
    done = process_wait(backend, shared, info.pid, 10)
    assert (done.running, done.exit_code, done.signal) == (False, 4, None)
    logs = process_logs(backend, shared, info.pid, 0)
    assert logs.data == "one\ntwo\nthree\n" and logs.offset == logs.end == 14 and not logs.running
    again = process_logs(backend, shared, info.pid, 4)  # re-attach from an offset: no duplicate
    assert (again.data, again.skipped) == ("two\nthree\n", 0)
    assert process_logs(backend, shared, info.pid, logs.offset).data == ""
    assert info.pid in [p.pid for p in processes(backend, shared)]


def test_survives_later_execs_and_their_deadline_kill(
    backend: SandboxManager, shared: Sandbox
) -> None:
    pid = start(backend, shared, shell="while :; do sleep 0.2; done")
    assert exec_command(backend, shared, ExecRequest(shell="echo hi")).stdout == "hi\n"
    timed = exec_command(backend, shared, ExecRequest(shell="sleep 30 & sleep 30", timeout_s=1))
    assert timed.timed_out
    assert process_wait(backend, shared, pid, 0).running
    killed = process_kill(backend, shared, pid, "KILL")
    assert killed.sandbox == shared.id
    assert process_wait(backend, shared, pid, 10).signal == 9


def test_port_of_a_background_server_reachable_from_later_execs(
    backend: SandboxManager, shared: Sandbox
) -> None:
    exec_command(
        backend, shared, ExecRequest(shell="mkdir -p site && echo served > site/index.html")
    )
    pid = start(backend, shared, argv=["python3", "-m", "http.server", "8765", "-b", "127.0.0.1"],
                cwd="site")  # fmt: skip
    fetch = (
        "import time, urllib.request\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        print(urllib.request.urlopen('http://127.0.0.1:8765/').read().decode(), end='')\n"
        "        break\n"
        "    except OSError:\n"
        "        time.sleep(0.1)\n"
    )
    assert (
        exec_command(backend, shared, ExecRequest(python=fetch, timeout_s=20)).stdout == "served\n"
    )
    process_kill(backend, shared, pid)
    assert not process_wait(backend, shared, pid, 10).running


def test_stdin_and_signals(backend: SandboxManager, shared: Sandbox) -> None:
    pid = start(backend, shared, argv=["cat"])
    assert process_stdin(backend, shared, pid, "hello\n") == 6
    assert process_stdin(backend, shared, pid, "bye\n", eof=True) == 4
    done = process_wait(backend, shared, pid, 10)
    assert done.exit_code == 0 and process_logs(backend, shared, pid).data == "hello\nbye\n"
    pid = start(
        backend, shared, shell="trap 'echo got TERM; exit 3' TERM; while :; do sleep 0.1; done"
    )
    time.sleep(0.3)  # let the shell install its trap
    process_kill(backend, shared, pid, "TERM")
    assert process_wait(backend, shared, pid, 10).exit_code == 3


def test_unknown_pid_is_not_found(backend: SandboxManager, shared: Sandbox) -> None:
    with pytest.raises(NotFound) as err:
        process_logs(backend, shared, 999_999)
    assert err.value.context["field"] == "pid"


def test_output_buffer_and_live_count_are_bounded(
    backend: SandboxManager, sandbox_factory: SandboxFactory
) -> None:
    sbx = sandbox_factory(quotas=Quotas(output_bytes=1024, background_processes=2))
    pid = start(backend, sbx, python="import sys; sys.stdout.write('x' * 5000 + 'END')")
    process_wait(backend, sbx, pid, 10)
    logs = process_logs(backend, sbx, pid, 0)
    assert (logs.skipped, logs.offset, len(logs.data)) == (5003 - 1024, 5003, 1024)
    assert logs.data.endswith("END")
    assert process_logs(backend, sbx, pid, 5000).data == "END"  # still kept: exact
    a = start(backend, sbx, argv=["sleep", "60"])
    start(backend, sbx, argv=["sleep", "60"])
    with pytest.raises(LimitExceeded) as err:
        start(backend, sbx, argv=["sleep", "60"])
    assert err.value.context["field"] == "quotas.background_processes"
    assert live_processes(backend, sbx) == 2
    process_kill(backend, sbx, a, "KILL")
    process_wait(backend, sbx, a, 10)
    start(backend, sbx, argv=["true"])  # room again
