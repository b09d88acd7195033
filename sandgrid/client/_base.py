"""The SDK's pure half: builds requests and maps responses and errors, no I/O.

``Client`` and ``AsyncClient`` are thin shells that send what these builders
return and hand the response back to the call's ``parse``; so the two cannot
drift. Errors come back as the same ``SandgridError`` subclass the server raised
(``sandgrid.errors.error_from_body``). Imports only httpx, pydantic and the
contract modules: never ``docker``, ``minio``, ``celery`` or ``redis``.

Retries are decided here too (``RetryPolicy.delay``); the shells only sleep.
What is retried is what cannot run anything twice:

- a request that never reached the API (connection refused or timed out);
- 429 (backpressure, a tenant's turn ceiling): the API refused before doing
  anything, and says when to come back (``Retry-After``);
- 503 ``registry_unavailable`` / ``store_unavailable`` (or a connection that broke
  after the request was sent) only for calls that are safe to repeat: GET and
  DELETE, and exec, which carries an ``Idempotency-Key`` (one per call, the same
  on each of its retries; pass your own to make an exec idempotent across
  processes): a retried exec answers the first run's result, never runs twice.

Other writes (session create, file writes, tar upload, batch create) carry no
key and are not retried after the API may have acted on them: the caller sees
the 503 and decides.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from sandgrid.audit import AuditPage
from sandgrid.batch.models import BatchCreate, BatchInfo, BatchIsolation, BatchJob, BatchResult
from sandgrid.client._pty import pty_url
from sandgrid.errors import (
    UNAVAILABLE_CODES,
    ErrorCode,
    InfrastructureError,
    InvalidInput,
    LimitExceeded,
    SandgridError,
    error_from_body,
)
from sandgrid.models import (
    IDEMPOTENCY_HEADER,
    NEXT_OFFSET_HEADER,
    CodeRequest,
    CodeResult,
    ExecRequest,
    ExecResult,
    FileEntry,
    FileList,
    FileRead,
    FileWrite,
    Quotas,
    SandboxTypeInfo,
    SessionCreate,
    SessionInfo,
    SessionList,
    SnapshotPolicy,
    TypeList,
)
from sandgrid.settings import DEFAULT_API_URL, get_client_settings
from sandgrid.streaming import EVENT_STREAM, TurnCancel

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "EXEC_DEFAULT_WAIT_S",
    "EXEC_MARGIN_S",
    "BaseClient",
    "BatchPage",
    "Call",
    "FileContent",
    "RetryPolicy",
    "raise_for_error",
    "transport_error",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
FileContent = str | bytes
#: Result lines of a batch and the offset to read on from.
BatchPage = tuple[list[BatchResult], int]

DEFAULT_TIMEOUT_S = 60.0
#: Added to an exec's own deadline for the HTTP wait (queue, restore, snapshot).
EXEC_MARGIN_S = 60.0
#: The HTTP wait of an exec without its own deadline (the session's applies).
EXEC_DEFAULT_WAIT_S = 3600.0 + EXEC_MARGIN_S
#: Retries of a call, when safe (``RetryPolicy``).
DEFAULT_RETRIES = 3
_SAFE_METHODS = frozenset({"GET", "DELETE"})


@dataclass(frozen=True)
class RetryPolicy:
    """How the SDK retries what is safe to retry (see the module doc).

    Attributes:
        attempts: tries in all, the first included (1: never retry).
        backoff_s: the first wait; each next one doubles.
        max_wait_s: the cap of one wait, a server's ``Retry-After`` included; a
            429 that asks for longer is not retried.
        total_s: the cap of all waits of one call together.
    """

    attempts: int = 1 + DEFAULT_RETRIES
    backoff_s: float = 0.25
    max_wait_s: float = 4.0
    total_s: float = 20.0

    @classmethod
    def of(cls, retries: RetryPolicy | int) -> RetryPolicy:
        """A policy from ``Client(retries=...)``: a policy, or how many retries."""
        return retries if isinstance(retries, RetryPolicy) else cls(attempts=1 + max(0, retries))

    def delay(
        self, call: Call[Any], error: SandgridError, tries: int, waited: float
    ) -> float | None:
        """Seconds to wait before trying ``call`` again after ``error``, or None.

        Args:
            call: the call that failed.
            error: how it failed (a transport error, or the server's error).
            tries: how many tries were made.
            waited: the seconds already waited between them.
        """
        hint = _retry_hint(call, error)
        if hint is None or tries >= self.attempts:
            return None
        wait = max(hint, self.backoff_s * 2 ** (tries - 1))
        if isinstance(error, LimitExceeded) and hint > self.max_wait_s:
            return None
        wait = min(wait, self.max_wait_s, self.total_s - waited)
        return wait if wait > 0 else None


def _retry_hint(call: Call[Any], error: SandgridError) -> float | None:
    """The server's wait hint when ``error`` is safe to retry for ``call``, else None."""
    hint = float(error.context.get("retry_after", 0.0) or 0.0)
    if error.code == ErrorCode.API_UNREACHABLE:
        return hint if call.idempotent or not error.context.get("request_sent", True) else None
    if isinstance(error, LimitExceeded):
        return hint
    if error.code in UNAVAILABLE_CODES and call.idempotent:
        return hint
    return None


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


def _model(cls: type[M], **fields: Any) -> M:
    """Validate client-side so that bad input fails before a round trip, as on the server."""
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


def _parse(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda r: cls.model_validate_json(r.content)


def _json(r: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = r.json()
    return body


def _file_write(path: str, content: FileContent, mode: int) -> FileWrite:
    if isinstance(content, bytes):
        encoded = base64.b64encode(content).decode()
        return _model(FileWrite, path=path, content=encoded, encoding="base64", mode=mode)
    return _model(FileWrite, path=path, content=content, encoding="utf-8", mode=mode)


def _read(binary: bool) -> Callable[[httpx.Response], FileContent]:
    def parse(r: httpx.Response) -> FileContent:
        read = FileRead.model_validate_json(r.content)
        if read.encoding == "base64":
            raw = base64.b64decode(read.content)
            return raw if binary else raw.decode()
        return read.content.encode() if binary else read.content

    return parse


class BaseClient:
    """Configuration and request builders shared by ``Client`` and ``AsyncClient``.

    Args:
        base_url: the API, e.g. ``http://127.0.0.1:8700``; ``SANDGRID_API_URL``.
        token: the tenant's bearer token; ``SANDGRID_TOKEN``.
        timeout: seconds for calls other than exec (which waits for its deadline).
        retries: how many times a call is retried when that is safe, or a
            ``RetryPolicy``; 0 never retries.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: RetryPolicy | int = DEFAULT_RETRIES,
    ) -> None:
        if base_url is None or token is None:
            settings = get_client_settings()
            base_url = base_url or settings.api_url or DEFAULT_API_URL
            token = token if token is not None else settings.token
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry = RetryPolicy.of(retries)

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": "sandgrid-sdk/0.1"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _pty_target(
        self,
        session_id: str,
        rows: int,
        cols: int,
        term: str,
        idle_s: float | None,
        max_s: float | None,
    ) -> tuple[str, dict[str, str]]:
        """The terminal's WebSocket URL and headers (the token goes as a header)."""
        params = {"rows": rows, "cols": cols, "term": term, "idle_s": idle_s, "max_s": max_s}
        return pty_url(self.base_url, session_id, params), self._headers()

    # ---- builders (one per public method) ------------------------------------------

    def _create_session_call(
        self,
        type: str,
        quotas: Quotas | Mapping[str, Any] | None,
        env: Mapping[str, str] | None,
        files: Mapping[str, FileContent] | None,
        snapshot_policy: SnapshotPolicy,
        labels: Mapping[str, str] | None,
        fork_from: str | None,
    ) -> Call[SessionInfo]:
        spec = _model(
            SessionCreate,
            type=type,
            quotas=quotas,
            env=dict(env or {}),
            files=[_file_write(p, c, 0o644) for p, c in (files or {}).items()],
            snapshot_policy=snapshot_policy,
            labels=dict(labels or {}),
            fork_from=fork_from,
        )
        body = spec.model_dump(mode="json", exclude_defaults=True)
        return Call("POST", "/v1/sessions", _parse(SessionInfo), json=body)

    def _get_session_call(self, session_id: str) -> Call[SessionInfo]:
        return Call("GET", f"/v1/sessions/{session_id}", _parse(SessionInfo))

    def _list_sessions_call(self) -> Call[list[SessionInfo]]:
        return Call(
            "GET", "/v1/sessions", lambda r: SessionList.model_validate_json(r.content).sessions
        )

    def _types_call(self) -> Call[list[SandboxTypeInfo]]:
        return Call("GET", "/v1/types", lambda r: TypeList.model_validate_json(r.content).types)

    def _close_session_call(self, session_id: str) -> Call[SessionInfo]:
        return Call("DELETE", f"/v1/sessions/{session_id}", _parse(SessionInfo))

    def _exec_call(
        self,
        session_id: str,
        argv: Sequence[str] | None,
        shell: str | None,
        python: str | None,
        env: Mapping[str, str] | None,
        cwd: str,
        stdin: str | None,
        timeout_s: float | None,
        idempotency_key: str | None,
    ) -> Call[ExecResult]:
        request = _model(
            ExecRequest,
            argv=list(argv) if argv is not None else None,
            shell=shell,
            python=python,
            env=dict(env or {}),
            cwd=cwd,
            stdin=stdin,
            timeout_s=timeout_s,
        )
        wait = timeout_s + EXEC_MARGIN_S if timeout_s else EXEC_DEFAULT_WAIT_S
        body = request.model_dump(mode="json", exclude_defaults=True)
        path = f"/v1/sessions/{session_id}/exec"
        key = idempotency_key or uuid.uuid4().hex  # one per call, the same on its retries
        return Call(
            "POST",
            path,
            _parse(ExecResult),
            json=body,
            headers={IDEMPOTENCY_HEADER: key},
            timeout=wait,
            idempotent=True,
        )

    def _run_code_call(
        self, session_id: str, code: str, language: str, timeout_s: float | None
    ) -> Call[CodeResult]:
        """Code for the session's kernel: never retried once sent (it has effects)."""
        request = _model(CodeRequest, code=code, language=language, timeout_s=timeout_s)
        wait = timeout_s + EXEC_MARGIN_S if timeout_s else EXEC_DEFAULT_WAIT_S
        body = request.model_dump(mode="json", exclude_defaults=True)
        return Call(
            "POST", f"/v1/sessions/{session_id}/code", _parse(CodeResult), json=body, timeout=wait
        )

    def _exec_stream_call(self, call: Call[ExecResult]) -> Call[ExecResult]:
        """An exec call that asks for the turn's events (Server-Sent Events)."""
        return dataclasses.replace(call, headers={**(call.headers or {}), "Accept": EVENT_STREAM})

    def _events_call(self, session_id: str, turn_id: str, after: str) -> Call[None]:
        """Re-attach to a turn's events after offset ``after`` (``0``: all of them)."""
        path = f"/v1/sessions/{session_id}/turns/{turn_id}/events"
        return Call("GET", path, lambda r: None, params={"after": after})

    def _cancel_call(self, session_id: str, turn_id: str) -> Call[TurnCancel]:
        path = f"/v1/sessions/{session_id}/turns/{turn_id}/cancel"
        return Call("POST", path, _parse(TurnCancel), idempotent=True)

    def _write_files_call(
        self, session_id: str, files: Mapping[str, FileContent], mode: int
    ) -> Call[dict[str, Any]]:
        writes = [_file_write(p, c, mode).model_dump(mode="json") for p, c in files.items()]
        return Call("POST", f"/v1/sessions/{session_id}/files", _json, json={"files": writes})

    def _read_file_call(self, session_id: str, path: str, binary: bool) -> Call[FileContent]:
        params = {"path": path, "encoding": "base64" if binary else "utf-8"}
        return Call("GET", f"/v1/sessions/{session_id}/files", _read(binary), params=params)

    def _list_files_call(
        self, session_id: str, path: str, recursive: bool
    ) -> Call[list[FileEntry]]:
        params = {"path": path, "recursive": "true" if recursive else "false"}
        parse: Callable[[httpx.Response], list[FileEntry]] = lambda r: (  # noqa: E731
            FileList.model_validate_json(r.content).entries
        )
        return Call("GET", f"/v1/sessions/{session_id}/files/list", parse, params=params)

    def _delete_file_call(
        self, session_id: str, path: str, recursive: bool
    ) -> Call[dict[str, Any]]:
        params = {"path": path, "recursive": "true" if recursive else "false"}
        return Call("DELETE", f"/v1/sessions/{session_id}/files", _json, params=params)

    def _upload_tar_call(self, session_id: str, data: bytes, path: str) -> Call[dict[str, Any]]:
        return Call(
            "PUT",
            f"/v1/sessions/{session_id}/tar",
            _json,
            params={"path": path},
            content=data,
            headers={"Content-Type": "application/x-tar"},
        )

    def _download_tar_call(self, session_id: str, path: str) -> Call[bytes]:
        params = {"path": path}
        return Call("GET", f"/v1/sessions/{session_id}/tar", lambda r: r.content, params=params)

    def _health_call(self) -> Call[dict[str, Any]]:
        return Call("GET", "/v1/health", _json, accept=(503,))

    # ---- batches ------------------------------------------------------------------

    def _create_batch_call(
        self,
        jobs: Sequence[BatchJob | Mapping[str, Any]],
        type: str,
        concurrency: int,
        isolation: BatchIsolation,
        max_attempts: int,
        quotas: Quotas | Mapping[str, Any] | None,
        labels: Mapping[str, str] | None,
    ) -> Call[BatchInfo]:
        spec = _model(
            BatchCreate,
            type=type,
            jobs=[j if isinstance(j, BatchJob) else _model(BatchJob, **j) for j in jobs],
            concurrency=concurrency,
            isolation=isolation,
            max_attempts=max_attempts,
            quotas=quotas,
            labels=dict(labels or {}),
        )
        body = spec.model_dump(mode="json", exclude_defaults=True)
        body["jobs"] = [j.model_dump(mode="json", exclude_defaults=True) for j in spec.jobs]
        return Call("POST", "/v1/batches", _parse(BatchInfo), json=body)

    def _get_batch_call(self, batch_id: str) -> Call[BatchInfo]:
        return Call("GET", f"/v1/batches/{batch_id}", _parse(BatchInfo))

    def _batch_results_call(self, batch_id: str, offset: int, limit: int) -> Call[BatchPage]:
        def parse(r: httpx.Response) -> BatchPage:
            lines = [BatchResult.model_validate_json(x) for x in r.text.splitlines() if x]
            return lines, int(r.headers.get(NEXT_OFFSET_HEADER, offset + len(lines)))

        params = {"offset": offset, "limit": limit}
        return Call("GET", f"/v1/batches/{batch_id}/results", parse, params=params)

    def _cancel_batch_call(self, batch_id: str) -> Call[BatchInfo]:
        return Call("DELETE", f"/v1/batches/{batch_id}", _parse(BatchInfo))

    def _resume_batch_call(self, batch_id: str) -> Call[BatchInfo]:
        return Call("POST", f"/v1/batches/{batch_id}/resume", _parse(BatchInfo))

    def _audit_call(
        self, session: str | None, since: float | None, limit: int | None
    ) -> Call[AuditPage]:
        params = {"session": session, "since": since, "limit": limit}
        kept = {k: v for k, v in params.items() if v is not None}
        return Call("GET", "/v1/audit", _parse(AuditPage), params=kept)
