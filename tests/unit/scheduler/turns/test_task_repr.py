"""What Flower shows of a turn: the op and a short command head, never contents or secrets."""

from __future__ import annotations

from datetime import UTC, datetime

from sandgrid.models import ExecRequest, FileWrite, Quotas, SessionInfo
from sandgrid.ops.exec import ExecOp
from sandgrid.ops.files import ReadOp, WriteOp
from sandgrid.ops.session import CloseOp
from sandgrid.wire.jobs import TurnJob, TurnOp
from scheduler.turns.task_repr import describe

NOW = datetime.now(UTC)
SESSION = SessionInfo(
    id="s-" + "b" * 20,
    tenant="acme",
    type="python",
    quotas=Quotas(),
    env={"API_KEY": "env-secret-value"},
    created_at=NOW,
    last_used=NOW,
)


def _describe(op: TurnOp, **kw: bool) -> str:
    return describe(TurnJob(turn_id="t-x", session=SESSION, op=op, **kw))


def test_an_exec_shows_the_command_head_and_length_but_no_secrets() -> None:
    req = ExecRequest(shell="ls", env={"TOKEN": "req-secret"}, stdin="stdin-secret")
    text = _describe(ExecOp(request=req), batch=True)
    assert "op=exec shell='ls' (2 chars)" in text
    assert f"session={SESSION.id}" in text and "type=python" in text and "batch" in text
    assert "env=1 keys" in text and "stdin=(12 chars)" in text
    for secret in ("req-secret", "stdin-secret", "env-secret-value", "TOKEN"):
        assert secret not in text


def test_a_long_command_is_cut_and_measured() -> None:
    text = _describe(ExecOp(request=ExecRequest(python="x = 1\n" * 100)))
    assert "(600 chars)" in text and len(text) < 300


def test_a_write_shows_paths_never_contents() -> None:
    files = [FileWrite(path=f"f{i}.txt", content="file-secret") for i in range(5)]
    text = _describe(WriteOp(files=files))
    assert "op=write files=5 [f0.txt, f1.txt, f2.txt …]" in text
    assert "file-secret" not in text


def test_other_ops() -> None:
    assert "op=read path='a/b.txt'" in _describe(ReadOp(path="a/b.txt"))
    assert "op=close" in _describe(CloseOp())
