"""The AgentScope 2.0 backend's mapping of grid answers (``GridCalls``), with a fake client.

The real package and the real grid are ``tests/integration/test_agentscope2.py``;
here each grid answer the mapping must handle is scripted, and the ``sh``
programs of ``wrapper`` run under the host's own ``sh``.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import subprocess
from collections.abc import Callable
from typing import Any, cast

import pytest

from sandgrid.client import AsyncClient
from sandgrid.errors import ErrorCode, InvalidInput, LimitExceeded, NotFound, SandgridError
from sandgrid.integrations.agentscope import wrapper
from sandgrid.integrations.agentscope.calls import (
    STDIN_WRITE_BYTES,
    GridCalls,
    grid_failure,
    outcome_of,
)
from sandgrid.models import ExecResult

Answer = Callable[[list[str], dict[str, Any]], ExecResult]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ran(code: int | None, out: bytes = b"", err: bytes = b"", **flags: Any) -> ExecResult:
    """The grid's result of a ``wrapper.RUN`` command that wrote ``out`` and ``err``."""
    return ExecResult(exit_code=code, stdout=b64(out), stderr=b64(err), **flags)


class FakeClient:
    """The three SDK calls ``GridCalls`` makes, answered by scripts; every call recorded."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.answer = answer or (lambda argv, kw: ran(0))
        self.execs: list[tuple[list[str], dict[str, Any]]] = []
        self.reads: list[str] = []
        self.writes: list[dict[str, Any]] = []
        self.read_result: bytes | SandgridError = b""
        self.write_error: SandgridError | None = None

    async def exec(self, session_id: str, argv: list[str], **kw: Any) -> ExecResult:
        self.execs.append((argv, kw))
        return self.answer(argv, kw)

    async def read_file(self, session_id: str, path: str, *, binary: bool = False) -> bytes:
        self.reads.append(path)
        if isinstance(self.read_result, SandgridError):
            raise self.read_result
        return self.read_result

    async def write_files(self, session_id: str, files: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(files)
        if self.write_error is not None:
            raise self.write_error
        return {}


def calls(fake: FakeClient, **kw: Any) -> GridCalls:
    return GridCalls(cast(AsyncClient, fake), "s-1", **kw)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---- results ------------------------------------------------------------------------


def test_a_result_is_the_bytes_the_command_wrote() -> None:
    assert outcome_of(ran(3, b"\x00\xff", b"\xe9")) == (3, b"\x00\xff", b"\xe9")


def test_a_timeout_is_minus_one_timed_out_keeping_what_stdout_had() -> None:
    assert outcome_of(ran(None, b"part", b"x", timed_out=True)) == (-1, b"part", b"timed out")


def test_no_exit_status_is_minus_one_and_says_why() -> None:
    code, _, err = outcome_of(ran(None, cancelled=True))
    assert code == -1 and b"cancelled" in err


def test_a_cut_stream_is_never_silent() -> None:
    cut = base64.b64encode(b"abcdef").decode()[:-2]  # the cap fell inside a group
    result = ExecResult(exit_code=0, stdout=cut, stdout_truncated=True)
    code, out, err = outcome_of(result)
    assert (code, out) == (0, b"abc") and b"stdout cut at the session's output cap" in err


def test_text_that_is_not_the_wrapper_output_is_kept_as_it_came() -> None:
    result = ExecResult(exit_code=127, stderr="sandgrid: no directory /nope\n")
    assert outcome_of(result) == (127, b"", b"sandgrid: no directory /nope\n")


def test_a_grid_error_is_minus_one_with_its_code() -> None:
    exc = LimitExceeded("too many sessions", code=ErrorCode.TENANT_LIMIT)
    assert grid_failure(exc) == (-1, b"", b"sandgrid tenant_limit: too many sessions")


# ---- exec_shell ---------------------------------------------------------------------


def test_argv_runs_under_the_wrapper_in_the_asked_directory() -> None:
    fake = FakeClient()
    run(calls(fake).run(["echo", "a b"], "sub", 5))
    ((argv, kw),) = fake.execs
    assert argv == wrapper.run_argv(wrapper.RUN, "/workspace/sub", "echo", "a b")
    assert kw == {"timeout_s": 5}


def test_timeout_none_is_the_ceiling_and_a_longer_one_is_held_to_it() -> None:
    fake = FakeClient()
    grid = calls(fake, max_timeout_s=600)
    run(grid.run(["true"], None, None))
    run(grid.run(["true"], "/tmp", 9000))
    assert [kw["timeout_s"] for _, kw in fake.execs] == [600, 600]
    assert fake.execs[1][0][4] == "/tmp"


def test_a_non_positive_timeout_times_out_without_a_call() -> None:
    fake = FakeClient()
    assert run(calls(fake).run(["true"], None, 0)) == (-1, b"", b"timed out")
    assert fake.execs == []


def test_the_tenant_ceiling_the_grid_names_is_learnt_and_used() -> None:
    def answer(argv: list[str], kw: dict[str, Any]) -> ExecResult:
        if kw["timeout_s"] > 600:
            ctx = {"field": "timeout_s", "rule": "<= 600.0", "value": 3600, "ceiling": 600.0}
            raise InvalidInput("over the ceiling", context=ctx)
        return ran(0, b"ok")

    fake = FakeClient(answer)
    grid = calls(fake)
    assert run(grid.run(["true"], None, None)) == (0, b"ok", b"")
    assert grid.max_timeout_s == 600.0
    run(grid.run(["true"], None, None))
    assert [kw["timeout_s"] for _, kw in fake.execs] == [3600, 600, 600]


def test_another_refusal_is_not_retried() -> None:
    def answer(argv: list[str], kw: dict[str, Any]) -> ExecResult:
        raise InvalidInput("argv too long", context={"field": "argv"})

    fake = FakeClient(answer)
    assert run(calls(fake).run(["x"], None, 1)) == (
        -1,
        b"",
        b"sandgrid invalid_input: argv too long",
    )
    assert len(fake.execs) == 1


# ---- read_file / write_file -----------------------------------------------------------


def probe_answers(code: int) -> Answer:
    return lambda argv, kw: ran(code)


@pytest.mark.parametrize(
    ("probe", "kind"), [(errno.ENOENT, FileNotFoundError), (errno.EISDIR, IsADirectoryError)]
)
def test_a_refused_read_says_why_as_agentscope_does(probe: int, kind: type[OSError]) -> None:
    fake = FakeClient(probe_answers(probe))
    fake.read_result = InvalidInput("not a regular file")
    with pytest.raises(kind) as info:
        run(calls(fake).read("/workspace/x"))
    assert info.value.errno == probe and info.value.filename == "/workspace/x"


def test_a_missing_file_answered_not_found_is_file_not_found() -> None:
    fake = FakeClient(probe_answers(errno.ENOENT))
    fake.read_result = NotFound("path 'x' does not exist")
    with pytest.raises(FileNotFoundError):
        run(calls(fake).read("x"))
    assert fake.reads == ["/workspace/x"]


def test_a_file_over_the_cap_is_efbig_without_a_probe() -> None:
    fake = FakeClient()
    fake.read_result = InvalidInput("too big", code=ErrorCode.PAYLOAD_TOO_LARGE)
    with pytest.raises(OSError) as info:
        run(calls(fake).read("/workspace/big"))
    assert info.value.errno == errno.EFBIG and fake.execs == []


def test_a_read_outside_the_workspace_is_a_command() -> None:
    fake = FakeClient(lambda argv, kw: ran(0, b"\x00data"))
    assert run(calls(fake).read("/tmp/f")) == b"\x00data"
    assert fake.reads == [] and fake.execs[0][0][-1] == "/tmp/f"


def test_a_cut_read_outside_the_workspace_is_efbig() -> None:
    fake = FakeClient(lambda argv, kw: ran(0, b"part", stdout_truncated=True))
    with pytest.raises(OSError) as info:
        run(calls(fake).read("/tmp/f"))
    assert info.value.errno == errno.EFBIG


def test_a_workspace_link_out_is_read_as_a_command() -> None:
    fake = FakeClient(lambda argv, kw: ran(0, b"via exec"))
    fake.read_result = InvalidInput("leaves", code=ErrorCode.PATH_OUTSIDE_WORKSPACE)
    assert run(calls(fake).read("/workspace/link")) == b"via exec"


def test_a_write_in_the_workspace_is_the_file_api() -> None:
    fake = FakeClient()
    run(calls(fake).write("a/b.bin", b"\x00\xff"))
    assert fake.writes == [{"/workspace/a/b.bin": b"\x00\xff"}] and fake.execs == []


def test_a_write_over_the_cap_is_efbig() -> None:
    fake = FakeClient()
    fake.write_error = InvalidInput("too big", code=ErrorCode.PAYLOAD_TOO_LARGE)
    with pytest.raises(OSError) as info:
        run(calls(fake).write("/workspace/big", b"x"))
    assert info.value.errno == errno.EFBIG


def test_a_write_outside_the_workspace_goes_as_base64_stdin() -> None:
    fake = FakeClient(lambda argv, kw: ExecResult(exit_code=0))
    run(calls(fake).write("/tmp/x", b"\x01\x02"))
    ((argv, kw),) = fake.execs
    assert argv == wrapper.run_argv(wrapper.WRITE, "/tmp/x") and kw == {"stdin": b64(b"\x01\x02")}


def test_a_write_outside_the_workspace_over_a_directory_is_is_a_directory() -> None:
    fake = FakeClient(lambda argv, kw: ExecResult(exit_code=errno.EISDIR))
    with pytest.raises(IsADirectoryError):
        run(calls(fake).write("/tmp", b"x"))


def test_a_write_outside_the_workspace_over_the_stdin_cap_is_refused_before_any_call() -> None:
    fake = FakeClient()
    with pytest.raises(OSError) as info:
        run(calls(fake).write("/tmp/x", b"\0" * (STDIN_WRITE_BYTES + 1)))
    assert info.value.errno == errno.EFBIG and fake.execs == []


# ---- the sh programs, under the host's sh -------------------------------------------------


def host_run(*argv: str) -> tuple[int, bytes, bytes]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    result = ExecResult(exit_code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    return outcome_of(result)


def test_run_keeps_bytes_and_the_exit_status() -> None:
    script = "printf '\\000\\377\\342\\202'; printf '\\351' >&2; exit 7"
    argv = wrapper.run_argv(wrapper.RUN, "/tmp", "sh", "-c", script)
    assert host_run(*argv) == (7, b"\x00\xff\xe2\x82", b"\xe9")


def test_run_changes_directory_and_a_missing_one_is_127() -> None:
    assert host_run(*wrapper.run_argv(wrapper.RUN, "/tmp", "pwd"))[:2] == (0, b"/tmp\n")
    assert host_run(*wrapper.run_argv(wrapper.RUN, "/no/such/dir", "pwd"))[0] == 127


def test_run_of_a_missing_program_is_127() -> None:
    assert host_run(*wrapper.run_argv(wrapper.RUN, "/tmp", "no-such-program-xyz"))[0] == 127


def test_write_writes_the_bytes_and_refuses_a_directory(tmp_path: Any) -> None:
    target = tmp_path / "new" / "f.bin"
    argv = wrapper.run_argv(wrapper.WRITE, str(target))
    done = subprocess.run(argv, input=b64(b"\x00\xff"), text=True, timeout=30)
    assert done.returncode == 0 and target.read_bytes() == b"\x00\xff"
    over = subprocess.run(wrapper.run_argv(wrapper.WRITE, str(tmp_path)), input="", text=True)
    assert over.returncode == errno.EISDIR


def test_read_and_probe_answer_errno(tmp_path: Any) -> None:
    (tmp_path / "f").write_bytes(b"\x00x")
    read = [
        *wrapper.run_argv(wrapper.RUN, "/", *wrapper.run_argv(wrapper.READ, str(tmp_path / "f")))
    ]
    assert host_run(*read) == (0, b"\x00x", b"")
    assert host_run(*wrapper.run_argv(wrapper.PROBE, str(tmp_path)))[0] == errno.EISDIR
    assert host_run(*wrapper.run_argv(wrapper.PROBE, str(tmp_path / "n")))[0] == errno.ENOENT
