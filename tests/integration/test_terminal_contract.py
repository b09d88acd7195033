"""The agent's ``pty`` op on each real runtime (runc, runsc), through the channel.

The same ``backend`` fixture as ``test_backend_contract.py`` (both runtimes);
the terminal is driven the way the worker's bridge drives it: the ``pty``
request in one thread, ``AgentClient.notify`` control frames from another.
"""

from __future__ import annotations

import base64
import threading
import time
from typing import Any

import pytest

from sandgrid.models import ExecRequest
from worker.ops.exec import exec_command
from worker.sandboxes import Sandbox, SandboxManager

pytestmark = pytest.mark.integration

WAIT_S = 30.0


class Pty:
    """A running ``pty`` request and its output so far."""

    def __init__(self, backend: SandboxManager, sbx: Sandbox, **fields: Any) -> None:
        self.sbx, self.out, self.result = sbx, "", {}
        self.error: BaseException | None = None
        args = {"rows": 24, "cols": 80, "idle_s": 30, "max_s": 60, **fields}

        def run() -> None:
            try:
                self.result = backend.call(
                    sbx, "pty", args, timeout=float(args["max_s"]) + 10, on_chunk=self._chunk
                )
            except BaseException as exc:  # reported by join()
                self.error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def _chunk(self, _stream: str, text: str) -> None:
        self.out += text

    def type(self, text: str) -> None:
        assert self.sbx.channel is not None
        self.sbx.channel.notify("pty_input", {"data_b64": base64.b64encode(text.encode()).decode()})

    def control(self, op: str, **fields: Any) -> None:
        assert self.sbx.channel is not None
        self.sbx.channel.notify(op, fields)

    def wait_for(self, needle: str) -> None:
        end = time.monotonic() + WAIT_S
        while needle not in self.out:
            assert time.monotonic() < end, f"{needle!r} not in {self.out!r}"
            time.sleep(0.05)

    def join(self) -> dict[str, Any]:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the pty request did not answer"
        if self.error is not None:
            raise self.error
        return self.result


def test_pty_python_and_exit_code(backend: SandboxManager, shared: Sandbox) -> None:
    p = Pty(backend, shared)
    p.wait_for("/workspace$")
    p.type("python3\n")
    p.wait_for(">>>")
    p.type("print(6*7)\n")
    p.wait_for("42\r\n")
    p.type("exit()\n")
    p.type("tty; id -un; echo $TERM; exit 3\n")
    result = p.join()
    assert (result["exit_code"], result["reason"]) == (3, "exited")
    assert "/dev/pts/" in p.out and "sandbox\r\n" in p.out and "xterm-256color" in p.out
    assert backend.ping(shared) > 0  # the channel serves requests again


def test_pty_resize(backend: SandboxManager, shared: Sandbox) -> None:
    p = Pty(backend, shared, rows=30, cols=100)
    p.wait_for("$ ")
    p.type("stty size\n")
    p.wait_for("30 100")
    p.control("pty_resize", rows=50, cols=160)
    p.type("stty size\n")
    p.wait_for("50 160")
    p.control("pty_close")
    assert p.join()["reason"] == "closed"


def test_pty_close_kills_what_the_shell_started(backend: SandboxManager, shared: Sandbox) -> None:
    p = Pty(backend, shared)
    p.wait_for("$ ")
    p.type("sleep 1000 & setsid sleep 1001 & echo started\n")
    p.wait_for("started")
    p.control("pty_close")
    result = p.join()
    assert result["reason"] == "closed" and result["exit_code"] is None
    left = exec_command(backend, shared, ExecRequest(shell="pgrep -f 'sleep 100[01]' || echo none"))
    assert left.stdout == "none\n"


def test_pty_idle_limit(backend: SandboxManager, shared: Sandbox) -> None:
    p = Pty(backend, shared, idle_s=1.5)
    p.wait_for("$ ")
    result = p.join()  # nobody types: it ends by itself
    assert result["reason"] == "idle"


def test_pty_absolute_limit(backend: SandboxManager, shared: Sandbox) -> None:
    p = Pty(backend, shared, idle_s=30, max_s=2)
    p.wait_for("$ ")
    p.type("while true; do echo tick; sleep 0.2; done\n")  # never idle
    result = p.join()
    assert result["reason"] == "max_time" and "tick" in p.out


def test_pty_bad_size_refused(backend: SandboxManager, shared: Sandbox) -> None:
    from sandgrid.errors import InvalidInput

    with pytest.raises(InvalidInput) as err:
        backend.call(shared, "pty", {"rows": 0, "cols": 80, "idle_s": 1, "max_s": 1})
    assert err.value.context.get("field") == "rows"


def test_late_notifications_get_no_reply(backend: SandboxManager, shared: Sandbox) -> None:
    assert shared.channel is not None
    shared.channel.notify("pty_input", {"data_b64": ""})
    shared.channel.notify("pty_close", {})
    assert exec_command(backend, shared, ExecRequest(argv=["echo", "ok"])).stdout == "ok\n"


@pytest.mark.parametrize("delay_ms", [0, 1, 2, 3, 4, 6, 8, 11, 15, 20])
def test_a_closing_terminal_spares_a_command_that_starts_as_it_closes(
    backend: SandboxManager, shared: Sandbox, delay_ms: int
) -> None:
    """A closed terminal kills what its shell started, and nothing that another turn
    starts meanwhile: an exec sent just after the close (at several delays, so that
    some land in the middle of the kill) answers its own output."""
    p = Pty(backend, shared)
    p.wait_for("$ ")
    p.control("pty_close")
    time.sleep(delay_ms / 1000)
    result = exec_command(backend, shared, ExecRequest(shell="echo beside"))
    assert p.join()["reason"] == "closed"
    assert (result.exit_code, result.stdout) == (0, "beside\n")
