"""What Flower shows of a turn: ids, the op's kind and sizes, never a command or a value."""

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


def test_an_exec_shows_sizes_but_no_command_and_no_secrets() -> None:
    req = ExecRequest(shell="echo cmd-secret", env={"TOKEN": "req-secret"}, stdin="stdin-secret")
    text = _describe(ExecOp(request=req), batch=True)
    assert "op=exec shell=(15 chars)" in text
    assert f"session={SESSION.id}" in text and "type=python" in text and "batch" in text
    assert "env=1 keys" in text and "stdin=(12 chars)" in text
    for secret in ("cmd-secret", "req-secret", "stdin-secret", "env-secret-value", "TOKEN"):
        assert secret not in text


def test_a_long_command_is_measured_not_shown() -> None:
    text = _describe(ExecOp(request=ExecRequest(python="x = 1\n" * 100)))
    assert "python=(600 chars)" in text and "x = 1" not in text and len(text) < 200
    argv = _describe(ExecOp(request=ExecRequest(argv=["echo", "argv-secret"])))
    assert "argv=(2 words, 16 chars)" in argv and "argv-secret" not in argv


def test_a_write_shows_counts_never_paths_or_contents() -> None:
    files = [FileWrite(path=f"secret-name-{i}.txt", content="file-secret") for i in range(5)]
    text = _describe(WriteOp(files=files))
    assert "op=write files=5 (55 chars)" in text
    assert "file-secret" not in text and "secret-name" not in text


def test_other_ops_show_their_kind_only() -> None:
    text = _describe(ReadOp(path="a/secret-path.txt"))
    assert "op=read" in text and "secret-path" not in text
    assert "op=close" in _describe(CloseOp())
