"""Schemathesis over an API's ``/openapi.json``: the status-code and schema checks.

Shared by the in-process run (a real Redis, the fake worker) and the run against
a real grid: each operation gets at most ``max_examples`` generated requests,
and every failure of every operation is reported at once.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

__all__ = ["CHECKS", "conformance_failures"]

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@schemathesis.serializer("application/x-tar")
def _tar(ctx: Any, value: Any) -> bytes:
    """The tar upload's body: whatever bytes were generated (the API checks them)."""
    return value if isinstance(value, bytes) else str(value).encode()


def conformance_failures(
    schema: Any, headers: dict[str, str], *, max_examples: int, base_url: str | None = None
) -> list[str]:
    """Each operation's first failure under ``CHECKS``, as ``"METHOD /path: why"``."""
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

        try:
            run()
        except BaseException as exc:  # a FailureGroup is a BaseExceptionGroup
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{operation.label}: {_why(exc)[:2000]}")
    return failures


def _why(exc: BaseException) -> str:
    """The failure's message, with each of a group's own (Hypothesis reports several so)."""
    if isinstance(exc, BaseExceptionGroup):
        return f"{exc}: " + " | ".join(_why(one) for one in exc.exceptions)
    return str(exc)
