"""AgentScope Runtime's error shape on the workspace file routes: ``{"detail": ...}``.

The runtime's in-sandbox server is FastAPI raising ``HTTPException``, so every
failure of its file API is ``{"detail": "<message>"}`` (``"not found"``,
``"path exists and is a directory"``...), and code written against it reads
``response.json()["detail"]``. The grid's routes answer ``{"error": {...}}``;
these routes answer both: the runtime's ``detail`` beside the grid's ``error``
object (same status), so neither kind of caller loses what it reads.
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


def runtime_error_response(err: SandgridError) -> Response:
    """The grid's answer for ``err`` (status, headers), with the runtime's ``detail`` added."""
    response = error_response(err)
    body = {"detail": err.message, **err.to_body()}
    response.body = response.render(body)
    response.headers["content-length"] = str(len(response.body))
    return response


class RuntimeErrorRoute(APIRoute):
    """A route whose failures carry the runtime's ``detail`` (bad input included)."""

    def get_route_handler(self) -> _Handler:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            operation = f"{request.method} {request.url.path}"
            try:
                return await handler(request)
            except SandgridError as err:
                if not err.operation:
                    err.operation = operation
                return runtime_error_response(err)
            except RequestValidationError as exc:
                return runtime_error_response(invalid_input_from(exc.errors(), operation))

        return answer
