"""One HTTP call of the SDK as plain data: what to send and how to read the answer.

Every public method of the SDK builds a ``Call`` (``_requests``, ``_lifecycle``,
``_process_calls``) and hands it to its shell, which sends it (``Client._send``,
``AsyncClient._send``) and gives the response back to ``Call.read``; so the sync
and async halves share everything but the I/O. Errors come back as the same
``SandgridError`` subclass the server raised (``sandgrid.errors.error_from_body``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from sandgrid.errors import (
    ErrorCode,
    InfrastructureError,
    InvalidInput,
    SandgridError,
    error_from_body,
)

__all__ = [
    "Call",
    "FileContent",
    "model",
    "parse_answer",
    "parse_as",
    "parse_json",
    "raise_for_error",
    "transport_error",
    "transport_errors",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
FileContent = str | bytes
_SAFE_METHODS = frozenset({"GET", "DELETE"})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request to make and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] | None = None
    timeout: float | None = None
    accept: tuple[int, ...] = ()
    #: Safe to send again after the API may have acted on it (GET, DELETE, keyed exec).
    idempotent: bool = False

    def __post_init__(self) -> None:
        if self.method in _SAFE_METHODS:
            object.__setattr__(self, "idempotent", True)

    def build(
        self, http: httpx.Client | httpx.AsyncClient, timeout: float | None = None
    ) -> httpx.Request:
        """The request on ``http``, with ``timeout`` (None: the client's default)."""
        return http.build_request(
            self.method,
            self.path,
            params=self.params,
            json=self.json,
            content=self.content,
            headers=self.headers,
            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
        )

    def read(self, response: httpx.Response) -> T:
        """Raise the server's error, or parse the answer."""
        if response.status_code not in self.accept:
            raise_for_error(response)
        return self.parse(response)


def raise_for_error(response: httpx.Response) -> None:
    """Raise the server's ``SandgridError`` for a non-2xx response."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {"error": {"message": response.text[:500] or response.reason_phrase}}
    if not isinstance(body, dict):
        body = {"error": {"message": str(body)[:500]}}
    raise error_from_body(body, response.status_code)


def transport_error(exc: httpx.HTTPError, base_url: str) -> SandgridError:
    """A transport failure as an ``InfrastructureError`` the caller can catch;
    ``request_sent`` is False when the request cannot have reached the API."""
    unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
    return InfrastructureError(
        f"sandgrid API at {base_url} unreachable: {type(exc).__name__}: {exc}",
        code=ErrorCode.API_UNREACHABLE,
        operation="http",
        context={"api_url": base_url, "request_sent": not unsent},
    )


@contextmanager
def transport_errors(base_url: str) -> Iterator[None]:
    """Raise an httpx failure inside as the SDK's ``transport_error``."""
    try:
        yield
    except httpx.HTTPError as exc:
        raise transport_error(exc, base_url) from exc


def model(cls: type[M], **fields: Any) -> M:
    """Validate client-side so that bad input fails before a round trip, as on the server;
    a field given as None takes the model's default."""
    try:
        return cls(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(
            f"{field}: {first['msg']}",
            operation=cls.__name__,
            context={"field": field, "rule": first["msg"]},
        ) from exc


def parse_answer(cls: type[M], raw: bytes | str | dict[str, Any]) -> M:
    """An answer's body as ``cls``, ignoring the fields this SDK does not know.

    The grid refuses unknown fields in what it is sent, but its answers may
    grow: a newer grid's extra field must not break an older SDK.
    """
    if isinstance(raw, dict):
        return cls.model_validate(raw, extra="ignore")
    return cls.model_validate_json(raw, extra="ignore")


def parse_as(cls: type[M]) -> Callable[[httpx.Response], M]:
    """Read an answer as the model ``cls`` (``parse_answer``)."""
    return lambda r: parse_answer(cls, r.content)


def parse_json(r: httpx.Response) -> dict[str, Any]:
    """Read an answer as a JSON object."""
    body: dict[str, Any] = r.json()
    return body
