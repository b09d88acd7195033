"""The kernel host's message collection (pure) and the worker's run_code mapping."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sandgrid.errors import SandboxError
from sandgrid.models import CodeRequest, CodeResult, Quotas
from worker.agent.kernel import INTERRUPT_GRACE_S, host_argv, reply_deadline
from worker.agent.kernelhost import Collector, strip_ansi
from worker.ops.code import code_fields, code_result


def msg(kind: str, **content: Any) -> dict[str, Any]:
    return {"msg_type": kind, "content": content}


def test_collects_streams_result_display_error_until_idle() -> None:
    c = Collector(cap=1000)
    for m in (
        msg("status", execution_state="busy"),
        msg("execute_input", execution_count=7, code="..."),
        msg("stream", name="stdout", text="a"),
        msg("stream", name="stderr", text="e"),
        msg("stream", name="stdout", text="b"),
        msg("display_data", data={"image/png": "iVBO", "text/plain": "<Figure>"}),
        msg("execute_result", execution_count=7, data={"text/plain": "2", "text/html": "<b>2"}),
        msg("error", ename="E", evalue="v", traceback=["\x1b[0;31mE\x1b[0m: v"]),
    ):
        c.feed(m)
        assert not c.idle
    c.feed(msg("status", execution_state="idle"))
    r = c.reply()
    assert c.idle and (r["stdout"], r["stderr"], r["result"]) == ("ab", "e", "2")
    assert r["display"] == [{"image/png": "iVBO", "text/plain": "<Figure>"}, {"text/html": "<b>2"}]
    assert r["error"] == {"name": "E", "value": "v", "traceback": ["E: v"]}
    assert r["execution_count"] == 7
    assert CodeResult.model_validate(r).result == "2"


def test_every_output_is_capped_and_flagged() -> None:
    c = Collector(cap=4)
    c.feed(msg("stream", name="stdout", text="abc"))
    c.feed(msg("stream", name="stdout", text="def"))
    c.feed(msg("execute_result", data={"text/plain": "123456"}))
    c.feed(msg("display_data", data={"text/plain": "abc"}))
    c.feed(msg("display_data", data={"text/plain": "de"}))
    c.feed(msg("display_data", data={"application/json": {"k": 1}}))
    r = c.reply()
    assert (r["stdout"], r["stdout_truncated"], r["stderr_truncated"]) == ("abcd", True, False)
    assert (r["result"], r["result_truncated"]) == ("1234", True)
    assert r["display"] == [{"text/plain": "abc"}] and r["display_truncated"]


def test_strip_ansi() -> None:
    assert strip_ansi("\x1b[1;32mIn [\x1b[0m1]") == "In [1]"


def test_host_runs_from_this_package() -> None:
    argv, path = host_argv()
    assert argv[1:] == ["-m", "worker.agent.kernelhost"]
    assert os.path.isfile(os.path.join(path, "worker", "agent", "kernelhost.py"))


def test_fields_and_deadline_follow_the_quotas() -> None:
    quotas = Quotas(timeout_s=12, output_bytes=4096)
    fields = code_fields(CodeRequest(code="1"), quotas, {"A": "b"})
    assert fields == {"code": "1", "timeout": 12, "output_cap": 4096, "env": {"A": "b"}}
    assert code_fields(CodeRequest(code="1", timeout_s=3), quotas, {})["timeout"] == 3
    assert reply_deadline(3) > 3 + INTERRUPT_GRACE_S


def test_a_malformed_reply_is_a_sandbox_error() -> None:
    ok = code_result({"stdout": "x", "extra": 1}, node="n", timings={})
    assert (ok.stdout, ok.node) == ("x", "n")
    with pytest.raises(SandboxError):
        code_result({"execution_count": "many"}, node="n", timings={})


def test_request_rules_name_the_field() -> None:
    with pytest.raises(ValueError, match="code"):
        CodeRequest(code="x" * ((1 << 20) + 1))
    with pytest.raises(ValueError, match="language"):
        CodeRequest(code="1", language="r")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s"):
        CodeRequest(code="1", timeout_s=0)
