"""The OpenAPI document declares every operation's error answers with the one error body."""

from __future__ import annotations

from typing import Any

import schemathesis
from fastapi import APIRouter

from scheduler.api.responses import document_errors, error_statuses
from tests.support.conformance import conformance_failures
from tests.support.fakes import Grid

_METHODS = ("get", "put", "post", "delete", "patch")


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, item[method])
        for path, item in doc["paths"].items()
        for method in _METHODS
        if method in item
    ]


def test_every_operation_declares_its_error_statuses_with_the_error_body(grid: Grid) -> None:
    doc = grid.http.get("/openapi.json").json()
    for path, method, op in _operations(doc):
        for status in error_statuses(path, method, op):
            declared = op["responses"][str(status)]
            if path == "/v1/health" and status == 503:
                continue  # the health check's own body
            ref = declared["content"]["application/json"]["schema"]["$ref"]
            assert ref == "#/components/schemas/ErrorBody", (path, method, status)
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_session_routes_answer_401_404_409_422_429_503(grid: Grid) -> None:
    doc = grid.http.get("/openapi.json").json()
    statuses = set(doc["paths"]["/v1/sessions/{session_id}/exec"]["post"]["responses"])
    assert {"401", "404", "409", "413", "422", "429", "500", "503"} <= statuses


def test_a_route_added_later_gets_the_error_answers_by_construction(grid: Grid) -> None:
    router = APIRouter()

    @router.get("/v1/later/{thing}")
    def later(thing: str) -> dict[str, str]:
        return {"thing": thing}

    grid.app.include_router(router)
    grid.app.openapi_schema = None
    document_errors(grid.app)
    responses = grid.app.openapi()["paths"]["/v1/later/{thing}"]["get"]["responses"]
    assert {"404", "409", "422", "500", "503"} <= set(responses)


def test_schemathesis_finds_nothing_in_process(grid: Grid) -> None:
    """Status codes and response bodies conform (a real Redis, the fake worker)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", grid.app)
    assert conformance_failures(schema, grid.headers(), max_examples=15) == []
