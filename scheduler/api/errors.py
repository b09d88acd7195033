"""Errors at the HTTP edge: one JSON body shape for every failure.

Every error answer is ``SandgridError.to_body()`` with the error's status:
validation failures are 422 ``invalid_input`` naming the field (``loc``) and the
rule (``msg``), an unknown field too; a body that is not JSON (or not UTF-8) is
422 naming ``body``; a path leaving the workspace is ``path_outside_workspace``; a body
over the limit is 413 ``payload_too_large``; a background process whose sandbox
is gone is 410 ``process_lost``; Starlette's own answers (an unknown path, a
method not allowed) keep their status with the same body; Redis (the registry, the broker)
unreachable is 503 ``registry_unavailable`` with ``Retry-After``, whatever call
found it so: mapped here, once, from the client libraries' own exceptions;
a client that hangs up before its body is read is logged as information, not
as an error (the answer reaches nobody); anything unexpected is a 500
``internal`` without a traceback (that goes to the
log). Never a 500 for bad input, nor for a service that is down.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandgrid.errors import (
    RETRY_AFTER_S,
    UNAVAILABLE_CODES,
    AuthError,
    ErrorCode,
    InvalidInput,
    LimitExceeded,
    NotFound,
    SandgridError,
    unavailable,
)
from scheduler import metrics

__all__ = [
    "REGISTRY_DOWN",
    "EdgeMiddleware",
    "error_response",
    "http_error",
    "install_error_handlers",
    "invalid_input_from",
    "jsonrpc_error",
    "registry_unavailable",
]

#: What the Redis and Celery clients raise when Redis cannot be reached (or is
#: still loading its data after a restart).
REGISTRY_DOWN: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OperationalError,
)

log = logging.getLogger("sandgrid.api")

_WORKSPACE_RULE = "leaves the workspace"
_LOCATIONS = ("body", "query", "path", "header")
_STATUS_BY_CODE = {ErrorCode.PAYLOAD_TOO_LARGE: 413, ErrorCode.PROCESS_LOST: 410}
"""Codes whose status is not their class's: a lost process is gone (410), not a fault."""
_BODY_RULE = "must be JSON (UTF-8) matching the operation's schema"


def invalid_input_from(errors: Sequence[Any], operation: str = "") -> InvalidInput:
    """An ``InvalidInput`` naming the first bad field and its rule, listing all."""
    items = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        where = loc[0] if loc and loc[0] in _LOCATIONS else "body"
        fld = ".".join(loc[1:] if loc and loc[0] in _LOCATIONS else loc) or where
        rule = str(err.get("msg", ""))
        if err.get("type") == "json_invalid":  # loc is the offset in the body, not a field
            fld = "body"
            why = (err.get("ctx") or {}).get("error", "")
            rule = f"{_BODY_RULE}: {why} at character {loc[-1] if loc else 0}"
        items.append({"field": fld, "in": where, "rule": rule, "type": err.get("type", "")})
    first = items[0] if items else {"field": "", "rule": "invalid input"}
    code = ErrorCode.INVALID_INPUT
    if any(_WORKSPACE_RULE in i["rule"] for i in items):
        code = ErrorCode.PATH_OUTSIDE_WORKSPACE
    more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
    return InvalidInput(
        f"{first['field']}: {first['rule']}{more}",
        code=code,
        operation=operation,
        context={"field": first["field"], "rule": first["rule"], "errors": items[:20]},
    )


def registry_unavailable(exc: BaseException, operation: str) -> SandgridError:
    """The 503 of an operation that found Redis unreachable."""
    return unavailable(
        ErrorCode.REGISTRY_UNAVAILABLE,
        f"the session registry (Redis) is unavailable: {type(exc).__name__}: {exc}; "
        "try again shortly (an exec retried with its Idempotency-Key never runs twice)",
        operation=operation,
    )


def error_response(err: SandgridError, status: int | None = None) -> JSONResponse:
    """The HTTP answer of a ``SandgridError`` (status, body, helpful headers).

    ``status``: answer this one instead of the error's (Starlette's own refusals).
    """
    metrics.store_error(err)
    headers: dict[str, str] = {}
    if isinstance(err, LimitExceeded):
        headers["Retry-After"] = str(max(1, round(err.retry_after)))
    elif err.code in UNAVAILABLE_CODES or err.code == ErrorCode.NO_CAPACITY:
        after = float(err.context.get("retry_after", RETRY_AFTER_S))
        headers["Retry-After"] = str(max(1, round(after)))
    elif isinstance(err, AuthError):
        headers["WWW-Authenticate"] = "Bearer"
    status = status or _STATUS_BY_CODE.get(err.code, err.http_status)
    return JSONResponse(err.to_body(), status_code=status, headers=headers)


#: JSON-RPC's "invalid request": a body the transport refuses before it is parsed.
_JSONRPC_INVALID_REQUEST = -32600


def jsonrpc_error(err: SandgridError) -> dict[str, Any]:
    """A refusal made before a JSON-RPC request was read, as a JSON-RPC error.

    The MCP client shows a JSON-RPC error body at any status, but only a generic
    "Server returned an error response" for anything else: the code and the rule
    must be in this shape to reach the model. The id is null, as the request's
    own was never parsed.
    """
    body = err.to_body()["error"]
    message = f"{err.code}: {err.message}"
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": _JSONRPC_INVALID_REQUEST, "message": message, "data": body},
    }


def _operation(request: Request) -> str:
    return f"{request.method} {request.url.path}"


def install_error_handlers(app: FastAPI) -> None:
    """Route every exception type to the one body shape."""

    async def on_sandgrid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SandgridError)
        if not exc.operation:
            exc.operation = _operation(request)
        return error_response(exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return error_response(invalid_input_from(exc.errors(), _operation(request)))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        err = http_error(exc, _operation(request))
        response = error_response(err, None if exc.status_code == 400 else exc.status_code)
        response.headers.update(exc.headers or {})  # a 405's Allow
        return response

    async def on_registry_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("registry unavailable on %s: %s", _operation(request), exc)
        return error_response(registry_unavailable(exc, _operation(request)))

    async def on_client_gone(request: Request, exc: Exception) -> JSONResponse:
        # The caller hung up before its body was read: nothing was done, and the
        # answer reaches nobody; not an error of the grid's.
        log.info("client closed the connection during %s", _operation(request))
        err = InvalidInput(
            "the client closed the connection before its request was read",
            operation=_operation(request),
        )
        return error_response(err)

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", _operation(request), exc_info=exc)
        err = SandgridError(f"internal error: {type(exc).__name__}", operation=_operation(request))
        return error_response(err)

    app.add_exception_handler(SandgridError, on_sandgrid)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for exc_type in REGISTRY_DOWN:
        app.add_exception_handler(exc_type, on_registry_down)
    app.add_exception_handler(ClientDisconnect, on_client_gone)
    app.add_exception_handler(Exception, on_unexpected)


def http_error(exc: StarletteHTTPException, operation: str) -> SandgridError:
    """Starlette's and FastAPI's own refusals as errors of the one body shape.

    FastAPI answers 400 for a JSON body it cannot decode as UTF-8: that is bad
    input like any other, so 422 ``invalid_input`` naming ``body``. An unknown
    path is ``not_found``; any other (a method not allowed) is the caller's
    ``invalid_input``, answered with Starlette's own status (``on_http``).
    """
    if exc.status_code == 400:
        return InvalidInput(
            f"body: {_BODY_RULE} ({exc.detail})",
            operation=operation,
            context={"field": "body", "rule": _BODY_RULE},
        )
    if exc.status_code == 404:
        return NotFound(str(exc.detail), operation=operation)
    return InvalidInput(str(exc.detail), operation=operation)


class _TooLarge(Exception):
    pass


class EdgeMiddleware:
    """Stamps the request's start time (for ``timings.api_ms``) and caps body size.

    The cap is checked on ``Content-Length`` up front and again while the body
    streams in (chunked uploads), so an oversized body is never fully buffered.
    """

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, jsonrpc_paths: frozenset[str] = frozenset()
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.jsonrpc_paths = jsonrpc_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})["t0"] = time.perf_counter()
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await self._reject(scope, send, int(length))
            return
        seen = 0
        exceeded = False

        async def counted() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    exceeded = True
                    raise _TooLarge
            return message

        async def guarded(message: Message) -> None:
            if not exceeded:
                await send(message)

        with contextlib.suppress(_TooLarge):
            await self.app(scope, counted, guarded)
        if exceeded:
            await self._reject(scope, send, seen)

    async def _reject(self, scope: Scope, send: Send, size: int) -> None:
        err = InvalidInput(
            f"request body of {size} bytes or more exceeds the limit of {self.max_body_bytes}",
            code=ErrorCode.PAYLOAD_TOO_LARGE,
            context={
                "field": "body",
                "rule": f"<= {self.max_body_bytes} bytes",
                "limit": self.max_body_bytes,
            },
        )
        response = error_response(err)
        if scope.get("path") in self.jsonrpc_paths:
            response = JSONResponse(jsonrpc_error(err), status_code=413)
        await send({"type": "http.response.start", "status": 413, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})
