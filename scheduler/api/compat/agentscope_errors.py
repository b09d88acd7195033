"""AgentScope Runtime's error shape on its routes: ``{"detail": ...}``.

The runtime's servers are FastAPI raising ``HTTPException``, so every failure is
``{"detail": "<message>"}``: on the file API the bare message (``"not found"``,
``"path exists and is a directory"``...), on the manager's methods
``"Error in <method>: <message>"``, which its client puts in the error string a
method returns (``"... | Server Detail: ..."``). The grid's routes answer
``{"error": {...}}``; these answer both: the runtime's ``detail`` beside the
grid's ``error`` object (same status), so neither kind of caller loses what it
reads.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from sandgrid.errors import SandgridError
from scheduler.api.errors import error_response, invalid_input_from

__all__ = ["RuntimeErrorRoute", "runtime_error_response"]

_Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def runtime_error_response(err: SandgridError, method: str | None = None) -> Response:
    """The grid's answer for ``err`` (status, headers), with the runtime's ``detail`` added
    (``Error in <method>: ...`` for a manager method)."""
    response = error_response(err)
    detail = f"Error in {method}: {err.message}" if method else err.message
    body = {"detail": detail, **err.to_body()}
    response.body = response.render(body)
    response.headers["content-length"] = str(len(response.body))
    return response


class RuntimeErrorRoute(APIRoute):
    """A route whose failures carry the runtime's ``detail`` (bad input included)."""

    def get_route_handler(self) -> _Handler:
        handler = super().get_route_handler()
        method = None if self.path.startswith("/proxy/") else self.path.strip("/")

        async def answer(request: Request) -> Response:
            operation = f"{request.method} {request.url.path}"
            try:
                return await handler(request)
            except SandgridError as err:
                if not err.operation:
                    err.operation = operation
                return runtime_error_response(err, method)
            except RequestValidationError as exc:
                return runtime_error_response(invalid_input_from(exc.errors(), operation), method)

        return answer
