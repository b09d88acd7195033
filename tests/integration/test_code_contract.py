"""run_code against each real runtime (runc, runsc): the kernel's contract at the backend.

One sandbox per test (its kernel's state is what is tested); the kernel starts
with the first call and lives, as the sandbox user, between calls and beside execs.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sandgrid.models import CodeRequest, ExecRequest, Quotas
from worker.ops.code import run_code
from worker.ops.exec import exec_command
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n"


def code(backend: SandboxManager, sbx: Sandbox, source: str, **kw: Any) -> Any:
    return run_code(backend, sbx, CodeRequest(code=source, **kw), {})


def test_state_outputs_and_errors(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory()
    first = code(backend, sbx, "import os\nx = 41")
    assert first.error is None and first.result is None and not first.kernel_restarted
    r = code(backend, sbx, "print('out'); import sys; print('err', file=sys.stderr)\nx + 1")
    assert (r.stdout, r.stderr, r.result) == ("out\n", "err\n", "42")
    assert r.execution_count == first.execution_count + 1  # type: ignore[operator]
    r = code(backend, sbx, "def f(a):\n    return a / 0\nf(x)")
    assert r.error is not None and r.error.name == "ZeroDivisionError"
    assert r.error.value == "division by zero" and any("f(x)" in t for t in r.error.traceback)
    assert not any("\x1b[" in t for t in r.error.traceback)
    assert code(backend, sbx, "os.getcwd(), os.getuid()").result == "('/workspace', 1000)"


def test_matplotlib_figure_is_a_png(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory()
    r = code(backend, sbx, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert r.error is None, r.error
    pngs = [d["image/png"] for d in r.display if "image/png" in d]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(PNG)


def test_timeout_interrupts_and_keeps_state(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory()
    code(backend, sbx, "kept = 'yes'")
    r = code(backend, sbx, "import time\nwhile True: time.sleep(0.05)", timeout_s=1)
    assert r.timed_out and not r.kernel_restarted
    assert r.error is not None and r.error.name == "KeyboardInterrupt"
    after = code(backend, sbx, "kept")
    assert after.result == "'yes'" and not after.kernel_restarted


def test_hard_deadline_restarts_and_says_so(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory()
    code(backend, sbx, "kept = 1")
    stubborn = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)"
    r = code(backend, sbx, stubborn, timeout_s=1)
    assert r.timed_out and r.kernel_restarted
    assert r.error is not None and r.error.name == "KernelRestarted"
    after = code(backend, sbx, "'kept' in dir()")
    assert after.result == "False" and not after.kernel_restarted  # said once, not twice


def test_kernel_that_dies_is_reported(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory()
    code(backend, sbx, "y = 2")
    died = code(backend, sbx, "import os\nos._exit(3)")
    assert died.kernel_restarted and died.error is not None
    assert died.error.name == "KernelRestarted"
    r = code(backend, sbx, "'y' in dir()")
    assert r.result == "False" and not r.kernel_restarted


def test_exec_deadline_spares_the_kernel(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory()
    code(backend, sbx, "z = 3")
    t = exec_command(backend, sbx, ExecRequest(shell="sleep 30 & sleep 30", timeout_s=0.5))
    assert t.timed_out
    r = code(backend, sbx, "z")
    assert r.result == "3" and not r.kernel_restarted


def test_outputs_are_capped(backend: SandboxManager, sandbox_factory: Any) -> None:
    sbx = sandbox_factory(quotas=Quotas(output_bytes=2048))
    r = code(backend, sbx, "print('x' * 5000)\n'y' * 5000")
    assert r.stdout_truncated and len(r.stdout) == 2048
    assert r.result_truncated and r.result is not None and len(r.result) == 2048
    r = code(backend, sbx, "from IPython.display import display, HTML\n"
             "for i in range(5): display(HTML('<b>' + 'h' * 900 + '</b>'))")  # fmt: skip
    assert r.display_truncated and 0 < len(r.display) < 5


def test_fresh_sandbox_of_a_session_with_a_kernel(
    backend: SandboxManager, sandbox_factory: Any
) -> None:
    """The marker in the snapshotted home moves with the workspace: a restored sandbox
    says kernel_restarted on its first call."""
    src = sandbox_factory()
    code(backend, src, "v = 1")
    files = [r[0] for r in backend.files.scan(src, ["/home/sandbox"]) if r[1] == "file"]
    assert "/home/sandbox/.sandgrid/kernel" in files
    dst = sandbox_factory()
    backend.files.unpack(dst, backend.files.pack(src, files), ["/home/sandbox"], False)
    r = code(backend, dst, "'v' in dir()")
    assert r.kernel_restarted and r.result == "False"
    assert not code(backend, dst, "1").kernel_restarted
