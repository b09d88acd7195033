"""The sandgrid error tree.

Every error the grid raises, on any side of any wire, is a ``SandgridError``
with a stable ``code``. The HTTP API turns it into a JSON body
``{"error": {"code", "message", "operation", "context", "retryable"}}`` with the
status below; the SDK raises the same class again from that body; a Celery task
returns it inside its result so that nothing is pickled.

    SandgridError
    ├── InvalidInput            422  bad spec, path leaving the workspace (413: oversized payload)
    ├── AuthError               401  missing or unknown token
    ├── Forbidden               403  a preview URL forged, expired, revoked, or read-only (a method)
    ├── NotFound                404  unknown session (or another tenant's: same answer)
    ├── Conflict                409  session busy with a turn, or closed; a type in use
    ├── LimitExceeded           429  tenant ceiling or queue backpressure (Retry-After)
    ├── SandboxError            500  the sandbox could not serve the turn
    │   ├── SandboxLost              channel to the in-sandbox agent broke
    │   ├── CapacityError            no container could be had
    │   └── PortUnreachable     502  nothing listens on the sandbox port (issue 21.1)
    ├── SnapshotError           500  snapshot save/restore failed or did not verify
    └── InfrastructureError     503  worker lost, registry/broker or store unreachable (Retry-After)

``retryable`` says whether the *grid* may run the operation again without the
caller's consent: never for a turn whose user code may have started.
``retry_after`` (in ``context``) is the seconds a client should wait before it
tries again; the API sends it as the ``Retry-After`` header (429, and 503 when
the registry or the store is unavailable).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

__all__ = [
    "RETRY_AFTER_S",
    "UNAVAILABLE_CODES",
    "AuthError",
    "CapacityError",
    "Conflict",
    "ErrorCode",
    "Forbidden",
    "InfrastructureError",
    "InvalidInput",
    "LimitExceeded",
    "NotFound",
    "PortUnreachable",
    "SandboxError",
    "SandboxLost",
    "SandgridError",
    "SnapshotError",
    "error_from_body",
    "unavailable",
]


#: The Retry-After of an unavailable registry or store (s): Redis restarts in about this.
RETRY_AFTER_S = 2.0


class ErrorCode(StrEnum):
    """Stable codes, part of the public contract: never renamed."""

    INVALID_INPUT = "invalid_input"
    PATH_OUTSIDE_WORKSPACE = "path_outside_workspace"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNAUTHENTICATED = "unauthenticated"
    NOT_FOUND = "not_found"
    SESSION_BUSY = "session_busy"
    SESSION_CLOSED = "session_closed"
    TENANT_LIMIT = "tenant_limit"
    BACKPRESSURE = "backpressure"
    SANDBOX_ERROR = "sandbox_error"
    SANDBOX_LOST = "sandbox_lost"
    NO_CAPACITY = "no_capacity"
    SNAPSHOT_FAILED = "snapshot_failed"
    SNAPSHOT_CORRUPT = "snapshot_corrupt"
    WORKER_LOST = "worker_lost"
    TURN_TIMEOUT = "turn_timeout"
    STORE_UNAVAILABLE = "store_unavailable"
    REGISTRY_UNAVAILABLE = "registry_unavailable"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    API_UNREACHABLE = "api_unreachable"
    INTERNAL = "internal"
    TYPE_IN_USE = "type_in_use"  # 25.5: a sandbox type with open sessions cannot be removed
    CHECKPOINT_EXISTS = "checkpoint_exists"
    NO_SNAPSHOT = "no_snapshot"
    PROCESS_LOST = "process_lost"
    # issue 21.1: exposed ports and their preview URLs
    FORBIDDEN = "forbidden"
    SIGNATURE_INVALID = "signature_invalid"
    URL_EXPIRED = "url_expired"
    URL_REVOKED = "url_revoked"  # the session revoked its preview URLs since this one was made
    METHOD_NOT_ALLOWED = "method_not_allowed"
    PORT_NOT_LISTENING = "port_not_listening"
    PORT_LIMIT = "port_limit"
    MEMORY_UNSAVABLE = "memory_unsavable"


class SandgridError(Exception):
    """Root of every sandgrid error.

    Args:
        message: what went wrong, for a person.
        code: the stable code; defaults to the class's.
        operation: the operation that failed (``exec``, ``files.write``...).
        context: small JSON-able facts: the field, the rule, the limit, the path.
        retryable: whether the grid may retry without the caller.
    """

    default_code: ClassVar[ErrorCode] = ErrorCode.INTERNAL
    http_status: ClassVar[int] = 500
    default_retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        operation: str = "",
        context: dict[str, Any] | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.operation = operation
        self.context = dict(context or {})
        self.retryable = self.default_retryable if retryable is None else retryable

    def to_body(self) -> dict[str, Any]:
        """The JSON body of this error, as the API and the Celery results carry it."""
        return {
            "error": {
                "type": type(self).__name__,
                "code": str(self.code),
                "message": self.message,
                "operation": self.operation,
                "context": self.context,
                "retryable": self.retryable,
            }
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!s}, message={self.message!r})"


class InvalidInput(SandgridError):
    default_code = ErrorCode.INVALID_INPUT
    http_status = 422


class AuthError(SandgridError):
    default_code = ErrorCode.UNAUTHENTICATED
    http_status = 401


class Forbidden(SandgridError):
    """A credential that is not the tenant's token and does not allow this (a preview URL)."""

    default_code = ErrorCode.FORBIDDEN
    http_status = 403


class NotFound(SandgridError):
    default_code = ErrorCode.NOT_FOUND
    http_status = 404


class Conflict(SandgridError):
    default_code = ErrorCode.SESSION_BUSY
    http_status = 409


class LimitExceeded(SandgridError):
    default_code = ErrorCode.TENANT_LIMIT
    http_status = 429

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after
        self.context.setdefault("retry_after", retry_after)


class SandboxError(SandgridError):
    default_code = ErrorCode.SANDBOX_ERROR
    http_status = 500


class SandboxLost(SandboxError):
    default_code = ErrorCode.SANDBOX_LOST


class CapacityError(SandboxError):
    default_code = ErrorCode.NO_CAPACITY
    http_status = 503
    default_retryable = True


class PortUnreachable(SandboxError):
    """Nothing accepts on the sandbox port the request named (a bad gateway, not our fault)."""

    default_code = ErrorCode.PORT_NOT_LISTENING
    http_status = 502


class SnapshotError(SandgridError):
    default_code = ErrorCode.SNAPSHOT_FAILED
    http_status = 500


class InfrastructureError(SandgridError):
    default_code = ErrorCode.WORKER_LOST
    http_status = 503
    default_retryable = True


#: Codes of a service that is down for now: 503 with Retry-After, safe to retry
#: whenever the operation is (the SDK's retry policy).
UNAVAILABLE_CODES = frozenset({ErrorCode.REGISTRY_UNAVAILABLE, ErrorCode.STORE_UNAVAILABLE})


def unavailable(
    code: ErrorCode, message: str, *, operation: str = "", context: dict[str, Any] | None = None
) -> InfrastructureError:
    """A 503 for a service that is down (the registry, the store): it says which,
    and when to try again (``retry_after``)."""
    return InfrastructureError(
        message,
        code=code,
        operation=operation,
        context={"retry_after": RETRY_AFTER_S, **(context or {})},
        retryable=True,
    )


_BY_NAME: dict[str, type[SandgridError]] = {
    cls.__name__: cls
    for cls in (
        SandgridError,
        InvalidInput,
        AuthError,
        Forbidden,
        NotFound,
        Conflict,
        LimitExceeded,
        SandboxError,
        SandboxLost,
        CapacityError,
        PortUnreachable,
        SnapshotError,
        InfrastructureError,
    )
}


def error_from_body(body: dict[str, Any], status: int | None = None) -> SandgridError:
    """Rebuild the error that ``to_body`` described (SDK side, Celery results).

    Unknown types fall back on the HTTP status, then on ``SandgridError``.
    """
    err = body.get("error", body)
    cls = _BY_NAME.get(str(err.get("type", "")))
    if cls is None and status is not None:
        cls = next((c for c in _BY_NAME.values() if c.http_status == status), None)
    cls = cls or SandgridError
    try:
        code: ErrorCode | None = ErrorCode(err.get("code", "internal"))
    except ValueError:
        code = None
    context = dict(err.get("context") or {})
    kwargs: dict[str, Any] = {
        "code": code,
        "operation": str(err.get("operation", "")),
        "context": context,
        "retryable": bool(err.get("retryable", False)),
    }
    if cls is LimitExceeded:
        return LimitExceeded(
            str(err.get("message", "")),
            retry_after=float(context.get("retry_after", 1.0)),
            **kwargs,
        )
    return cls(str(err.get("message", "")), **kwargs)
