"""The bounds of a session's record (issue 23.9), each at its edge: the limit holds, one more fails.

Labels (count, key, value), env (count, name, size) and the record as a whole
travel in every listing and every turn's message: unbounded, a 2 MB label made
every ``GET /v1/sessions`` 2 MB. The API side (a 422 naming the field and the
limit) is in ``tests/unit/scheduler/api/test_api_limits.py``.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sandgrid.models import (
    MAX_ENV_BYTES,
    MAX_ENV_ENTRIES,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_NETWORK_BYTES,
    MAX_RECORD_BYTES,
    ExecRequest,
    NetworkPolicy,
    SessionCreate,
    env_bytes,
)


def _refused(match: str, **fields: object) -> str:
    with pytest.raises(ValidationError, match=match) as info:
        SessionCreate(**fields)  # type: ignore[arg-type]
    return str(info.value)


def test_label_count_edge() -> None:
    SessionCreate(labels={f"k{i}": "v" for i in range(MAX_LABELS)})
    why = _refused("labels", labels={f"k{i}": "v" for i in range(MAX_LABELS + 1)})
    assert f"at most {MAX_LABELS}" in why


@pytest.mark.parametrize("key", ["a", "a" * 63, "agentscope.session_ctx_id", "team/x-y_z.1"])
def test_label_keys_that_hold(key: str) -> None:
    SessionCreate(labels={key: "v"})


@pytest.mark.parametrize("key", ["", "a" * 64, "-a", "a-", "a b", "a=b", "é", ".a", "a\n"])
def test_label_keys_refused(key: str) -> None:
    assert "1-63 letters" in _refused("label key", labels={key: "v"})


def test_label_value_edge() -> None:
    SessionCreate(labels={"k": "x" * MAX_LABEL_VALUE})
    why = _refused("labels", labels={"k": "x" * (MAX_LABEL_VALUE + 1)})
    assert f"at most {MAX_LABEL_VALUE}" in why
    assert "control" in _refused("labels", labels={"k": "a\x00b"})


def test_env_count_edge() -> None:
    SessionCreate(env={f"V{i}": "" for i in range(MAX_ENV_ENTRIES)})
    why = _refused("env", env={f"V{i}": "" for i in range(MAX_ENV_ENTRIES + 1)})
    assert f"at most {MAX_ENV_ENTRIES}" in why


def _env_of(size: int) -> dict[str, str]:
    """Env of exactly ``size`` bytes of NAME=VALUE (4 entries)."""
    env = {f"V{i}": "" for i in range(4)}
    env["V0"] = "x" * (size - env_bytes(env))
    assert env_bytes(env) == size
    return env


def test_env_size_edge_on_the_session_and_on_an_exec() -> None:
    SessionCreate(env=_env_of(MAX_ENV_BYTES))
    assert f"at most {MAX_ENV_BYTES}" in _refused("env", env=_env_of(MAX_ENV_BYTES + 1))
    ExecRequest(shell="true", env=_env_of(MAX_ENV_BYTES))
    with pytest.raises(ValidationError, match=f"at most {MAX_ENV_BYTES}"):
        ExecRequest(shell="true", env=_env_of(MAX_ENV_BYTES + 1))


def test_env_size_counts_utf8_bytes() -> None:
    assert env_bytes({"A": "é"}) == 4  # A, =, and two bytes
    assert "must match" in _refused("env", env={"1A": "x"})
    assert "must match" in _refused("env", env={"A\n": "x"})
    assert "NUL" in _refused("env", env={"A": "x\x00"})


def test_network_policy_size_edge() -> None:
    entry = "a" * 60 + ".example.com"
    big = NetworkPolicy(allow=[entry] * 200)
    size = len(big.model_dump_json())
    assert size < MAX_NETWORK_BYTES
    fill = (MAX_NETWORK_BYTES - size) // (len(entry) + 3)
    NetworkPolicy(allow=[entry] * 200, deny=[entry] * fill)
    with pytest.raises(ValidationError, match=f"at most {MAX_NETWORK_BYTES}"):
        NetworkPolicy(allow=[entry] * 256, deny=[entry] * 256)


def _host(n: int) -> str:
    """A host name of ``n`` characters (labels of at most 50)."""
    parts, left = [], n
    while left > 51:
        parts.append("h" * 50)
        left -= 51
    return ".".join([*parts, "h" * left])


def _record_of(size: int) -> SessionCreate:
    """A session whose record (every field but files, as JSON) is exactly ``size`` bytes."""
    labels = {f"label-{i:02d}": "x" * MAX_LABEL_VALUE for i in range(MAX_LABELS)}
    fields = SessionCreate(labels=labels, env=_env_of(MAX_ENV_BYTES)).model_dump()
    fields["network"] = {"allow": ["*"], "deny": ["h"]}
    base = SessionCreate.model_validate(fields)
    missing = size - len(base.model_dump_json(exclude={"files"}).encode())
    many, rest = divmod(missing, 203)  # each entry of 200 characters adds 203 bytes
    fields["network"]["deny"] = [_host(200)] * many + [_host(1 + rest)]
    return SessionCreate.model_validate(fields)


def test_record_size_edge() -> None:
    at = _record_of(MAX_RECORD_BYTES)
    assert len(at.model_dump_json(exclude={"files"}).encode()) == MAX_RECORD_BYTES
    fields = at.model_dump()
    fields["network"]["deny"][-1] += "h"
    with pytest.raises(ValidationError, match=f"at most {MAX_RECORD_BYTES}"):
        SessionCreate.model_validate(fields)


def test_files_do_not_count_in_the_record() -> None:
    SessionCreate(files=[{"path": "big", "content": "x" * (2 * MAX_RECORD_BYTES)}])  # type: ignore[list-item]


def test_an_empty_program_is_refused_before_any_sandbox() -> None:
    with pytest.raises(ValidationError, match=r"argv\[0\]"):
        ExecRequest(argv=[""])
    ExecRequest(argv=["x", ""])  # an empty argument is an argument
