"""The error answers of every operation, declared in the OpenAPI document from one place.

Every failure at the edge has one body (``SandgridError.to_body()``, see
``scheduler.api.errors``), and which statuses an operation can answer follows
from what it is, not from what its author remembered to list: any operation
can meet a Redis outage (503) or a bug (500); one with a token can be refused
(401) and throttled (429); one with parameters or a body can be invalid (422);
one that takes a body (every POST, PUT, PATCH) can be sent one too large (413),
not JSON or with an unknown field (422); one on a resource (a path parameter)
can miss it (404) or find it busy or closed (409), and so can a create that names
one (``fork_from``); one on a background process can find it lost with its
sandbox (410).

``document_errors`` wraps the app's ``openapi()`` so that the rules run over
the routes as they are when the document is built: a router added later by
anyone gets its error answers by construction. A route that declares a status
itself (another body, as the health check's 503) keeps its own declaration.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from sandgrid.errors import ErrorCode

__all__ = ["ErrorBody", "ErrorDetail", "document_errors", "error_statuses"]

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_BODY_METHODS = ("post", "put", "patch")
_PROCESS = "/processes/{pid}"
_PORTS = ("/ports/{port}", "/p/{token}")  # issue 21.1: a preview refusal, a port not listening

_DESCRIPTIONS = {
    401: "unauthenticated: the bearer token is missing or unknown",
    404: "not_found: no such resource of this tenant (another tenant's looks the same)",
    409: "a conflict: session_busy (a turn is in flight), session_closed, or type_in_use",
    403: "forbidden: a preview URL forged or tampered (signature_invalid), expired "
    "(url_expired), revoked (url_revoked), or read-only for this method (method_not_allowed)",
    410: "process_lost: the process's sandbox is gone (its node died, the session moved)",
    413: "payload_too_large: the request body is over the limit",
    422: "invalid_input: names the field (context.field) and the rule (context.rule)",
    429: "tenant_limit or backpressure, with Retry-After",
    500: "internal, sandbox_error or snapshot_* (never for bad input)",
    502: "port_not_listening: nothing accepts on the sandbox port, or the session runs in "
    "no sandbox now",
    503: "registry_unavailable, store_unavailable, no_capacity, worker_lost, turn_timeout; "
    "with Retry-After where waiting helps",
}


class ErrorDetail(BaseModel):
    """The one error shape (``SandgridError.to_body()['error']``)."""

    type: str = Field(description="the SandgridError subclass, e.g. NotFound")
    code: ErrorCode
    message: str
    operation: str
    context: dict[str, Any]
    retryable: bool


class ErrorBody(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail


def error_statuses(path: str, method: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer, from its shape (see the module doc)."""
    found = {500, 503}
    has_params = bool(operation.get("parameters")) or "requestBody" in operation
    on_resource = "{" in path
    if operation.get("security"):
        found |= {401, 429}
    if has_params:
        found.add(422)
    if "requestBody" in operation or method in _BODY_METHODS:
        found |= {413, 422}  # any body may be too large, not JSON, or carry an unknown field
    if on_resource:
        found |= {404, 409}
    elif method == "post" and operation.get("security"):
        found |= {404, 409}  # a create can name another resource (fork_from)
    if _PROCESS in path:
        found.add(410)
    if any(p in path for p in _PORTS):
        found |= {403, 404, 409, 422, 429, 502} if path.startswith("/p/") else {502}
    return sorted(found)


def _declare(doc: dict[str, Any]) -> None:
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorDetail"] = ErrorDetail.model_json_schema(
        ref_template="#/components/schemas/{model}"
    )
    schemas["ErrorDetail"].pop("$defs", None)
    schemas["ErrorCode"] = {"type": "string", "enum": [str(c) for c in ErrorCode]}
    schemas["ErrorDetail"]["properties"]["code"] = {"$ref": "#/components/schemas/ErrorCode"}
    schemas["ErrorBody"] = {
        "title": "ErrorBody",
        "type": "object",
        "properties": {"error": {"$ref": "#/components/schemas/ErrorDetail"}},
        "required": ["error"],
    }
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path, item in doc.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for status in error_statuses(path, method, operation):
                declared = responses.get(str(status))
                ours = status == 422 and _is_fastapi_422(declared)
                if declared is None or ours:
                    responses[str(status)] = {
                        "description": _DESCRIPTIONS[status],
                        "content": body,
                    }
    for unused in ("HTTPValidationError", "ValidationError"):
        if f'/schemas/{unused}"' not in json.dumps(doc):
            schemas.pop(unused, None)


def _is_fastapi_422(declared: dict[str, Any] | None) -> bool:
    """FastAPI's own 422 (its ``HTTPValidationError``), which our handler never answers."""
    if declared is None:
        return False
    schema = declared.get("content", {}).get("application/json", {}).get("schema", {})
    return str(schema.get("$ref", "")).endswith("/HTTPValidationError")


def document_errors(app: FastAPI) -> None:
    """Make ``app.openapi()`` declare every operation's error answers with ``ErrorBody``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _declare(doc)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
