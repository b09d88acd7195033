"""Validation messages of the wire models name the field and the rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandgrid.models import ExecRequest, FileWrite, Quotas, SessionCreate, workspace_path
from sandgrid.wire.jobs import TurnJob


def _only_error(exc: pytest.ExceptionInfo[ValidationError]) -> tuple[str, str]:
    err = exc.value.errors()[0]
    return ".".join(str(p) for p in err["loc"]), err["msg"]


def test_exec_needs_exactly_one_command() -> None:
    with pytest.raises(ValidationError) as exc:
        ExecRequest(argv=["a"], shell="b")
    assert "exactly one of argv, shell, python" in _only_error(exc)[1]
    with pytest.raises(ValidationError) as exc:
        ExecRequest()
    assert "got none" in _only_error(exc)[1]


@pytest.mark.parametrize("path", ["..", "../x", "a/../../x", "/etc/passwd", "/workspacex/a", ""])
def test_paths_leaving_the_workspace_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        workspace_path(path)
    with pytest.raises(ValidationError) as exc:
        FileWrite(path=path)
    loc, msg = _only_error(exc)
    assert (loc == "path" and path in msg) or "non-empty" in msg


@pytest.mark.parametrize(
    ("raw", "norm"), [("/workspace", "."), ("/workspace/a/b", "a/b"), ("a/./b/../c", "a/c")]
)
def test_paths_are_normalised(raw: str, norm: str) -> None:
    assert workspace_path(raw) == norm


def test_env_names_and_values() -> None:
    with pytest.raises(ValidationError) as exc:
        ExecRequest(shell="x", env={"A-B": "1"})
    assert _only_error(exc)[0] == "env" and "'A-B'" in _only_error(exc)[1]
    with pytest.raises(ValidationError) as exc:
        ExecRequest(shell="x", env={"A": "\x00"})
    assert "NUL" in _only_error(exc)[1]


def test_quota_bounds_name_the_field() -> None:
    with pytest.raises(ValidationError) as exc:
        SessionCreate(quotas=Quotas(memory_mb=1))
    assert _only_error(exc) == ("memory_mb", "Input should be greater than or equal to 32")


def test_models_are_frozen_and_closed() -> None:
    q = Quotas()
    with pytest.raises(ValidationError):
        q.cpus = 2  # type: ignore[misc]
    with pytest.raises(ValidationError) as exc:
        SessionCreate.model_validate({"typo": 1})
    assert _only_error(exc) == ("typo", "Extra inputs are not permitted")


def test_turn_job_round_trips_through_json() -> None:
    from datetime import UTC, datetime

    from sandgrid.models import SessionInfo
    from sandgrid.wire.jobs import ExecOp

    now = datetime.now(UTC)
    info = SessionInfo(
        id="s-" + "a" * 32,
        tenant="t",
        type="python",
        quotas=Quotas(),
        created_at=now,
        last_used=now,
    )
    job = TurnJob(turn_id="t-1", session=info, op=ExecOp(request=ExecRequest(shell="ls")))
    again = TurnJob.model_validate(job.model_dump(mode="json"))
    assert again == job and again.op.kind == "exec"


def test_base64_content_must_decode() -> None:
    assert FileWrite(path="a", content="aGk=", encoding="base64").content == "aGk="
    assert FileWrite(path="a", content="\u00dd").content == "\u00dd"  # utf-8: any text
    for bad in ("\u00ddA==", "abc", "a b="):
        with pytest.raises(ValidationError, match="content is not valid base64"):
            FileWrite(path="a", content=bad, encoding="base64")
