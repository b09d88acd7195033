"""Every error survives the wire: to_body -> JSON -> error_from_body."""

from __future__ import annotations

import json

import pytest

from sandgrid import errors as E


@pytest.mark.parametrize(
    "cls",
    [
        E.SandgridError,
        E.InvalidInput,
        E.AuthError,
        E.NotFound,
        E.Conflict,
        E.SandboxError,
        E.SandboxLost,
        E.CapacityError,
        E.SnapshotError,
        E.InfrastructureError,
    ],
)
def test_round_trip(cls: type[E.SandgridError]) -> None:
    err = cls("it broke", operation="exec", context={"field": "argv"})
    back = E.error_from_body(json.loads(json.dumps(err.to_body())))
    assert type(back) is cls
    assert (back.code, back.message, back.operation, back.context, back.retryable) == (
        err.code,
        err.message,
        err.operation,
        err.context,
        err.retryable,
    )


def test_limit_exceeded_keeps_retry_after() -> None:
    err = E.LimitExceeded("slow down", code=E.ErrorCode.BACKPRESSURE, retry_after=2.5)
    back = E.error_from_body(err.to_body(), 429)
    assert isinstance(back, E.LimitExceeded)
    assert back.retry_after == 2.5 and back.code == E.ErrorCode.BACKPRESSURE


def test_inner_body_and_unknown_type_fall_back_on_status() -> None:
    inner = E.NotFound("gone").to_body()["error"]
    assert isinstance(E.error_from_body(inner), E.NotFound)
    odd = {"error": {"type": "Future", "code": "new_code", "message": "m"}}
    back = E.error_from_body(odd, 409)
    assert isinstance(back, E.Conflict) and back.code == E.ErrorCode.SESSION_BUSY


def test_codes_are_stable_strings() -> None:
    assert E.ErrorCode.SESSION_BUSY == "session_busy"
    assert E.Conflict("x").http_status == 409 and E.LimitExceeded("x").http_status == 429
