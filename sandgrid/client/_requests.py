"""The requests of the API's session, turn and audit routes: one builder a call.

Each builder is the one definition of a public SDK method: its signature, its
defaults and its docstring are what ``Client``/``AsyncClient`` (and, with the
session id filled in, ``Session``/``AsyncSession``) show; it validates the input
client-side (an ``InvalidInput`` before any round trip) and returns the ``Call``
a shell sends. Methods with many keywords take them as a ``TypedDict``
(``SessionOptions``, ``ExecOptions``...), so that each keyword is named once for
every method that takes it. The file and batch routes: ``_files``, ``_batches``.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

from sandgrid.audit import AuditOrder, AuditPage
from sandgrid.client._call import Call, FileContent, model, parse_answer, parse_as, parse_json
from sandgrid.client._files import file_write
from sandgrid.client._network import NetworkPolicyLike, network_policy
from sandgrid.models import (
    IDEMPOTENCY_HEADER,
    CodeRequest,
    CodeResult,
    ExecRequest,
    ExecResult,
    IdleAction,
    Quotas,
    SessionCreate,
    SessionInfo,
    SessionList,
    SnapshotPolicy,
)
from sandgrid.sandbox_types import SandboxTypeInfo, TypeList
from sandgrid.streaming import EVENT_STREAM, TurnCancel

__all__ = [
    "EXEC_DEFAULT_WAIT_S",
    "EXEC_MARGIN_S",
    "Argv",
    "AuditFilters",
    "ChunkHandler",
    "CommandOptions",
    "ExecOptions",
    "OutputOptions",
    "SessionOptions",
    "audit",
    "cancel",
    "check_keywords",
    "close_session",
    "command_request",
    "create_session",
    "events_call",
    "exec_call",
    "exec_stream_call",
    "get_session",
    "health",
    "list_sessions",
    "run_code",
    "streamed",
    "types",
]

#: Added to an exec's own deadline for the HTTP wait (queue, restore, snapshot).
EXEC_MARGIN_S = 60.0
#: The HTTP wait of an exec without its own deadline (the session's applies).
EXEC_DEFAULT_WAIT_S = 3600.0 + EXEC_MARGIN_S

#: A command as a list of words (exactly one of it, ``shell``, ``python``).
Argv = Sequence[str] | None
ChunkHandler = Callable[[str], None]
"""Receives each chunk of output text (``on_stdout``, ``on_stderr``)."""


class AuditFilters(TypedDict, total=False):
    """The keywords of ``audit_records``: ``audit``'s, but the cursor, which it follows."""

    session: str | None
    since: float | None
    limit: int | None
    action: str | None
    order: AuditOrder | None


class SessionOptions(TypedDict, total=False):
    """The keywords of ``create_session`` and ``session`` (a session's spec).

    Attributes:
        quotas: the session's limits (the type's defaults for the rest).
        env: environment of every command.
        files: written before the session is returned (text, or bytes).
        snapshot_policy: when the workspace is saved; ``after_turn`` by default.
        labels: for finding the session again.
        fork_from: a session (or ``session@checkpoint``) whose workspace to start from.
        network: what the session may reach (docs/network.md), as a ``NetworkPolicy``
            or ``{"allow": ["pypi.org:443"], "deny": [...]}``; None: the type's or
            the tenant's default (offline unless the operator set one).
        on_idle: ``memory`` pauses an idle session with its processes (gVisor types;
            docs/memory.md) instead of releasing it; ``release`` by default.
    """

    quotas: Quotas | Mapping[str, Any] | None
    env: Mapping[str, str] | None
    files: Mapping[str, FileContent] | None
    snapshot_policy: SnapshotPolicy
    labels: Mapping[str, str] | None
    fork_from: str | None
    network: NetworkPolicyLike | None
    on_idle: IdleAction


class CommandOptions(TypedDict, total=False):
    """What a command is besides ``argv``: the keywords of ``start_process``.

    Attributes:
        shell: a shell line (instead of ``argv``).
        python: Python source (instead of ``argv``).
        env: more environment for this command.
        cwd: its directory in the workspace; ``.`` by default.
    """

    shell: str | None
    python: str | None
    env: Mapping[str, str] | None
    cwd: str


class ExecOptions(CommandOptions, total=False):
    """The keywords of ``exec_stream`` (and, with ``OutputOptions``, of ``exec``).

    Attributes:
        stdin: text for the command's stdin.
        timeout_s: its deadline (the session's when None).
        idempotency_key: the exec's key; a new one per call when None.
    """

    stdin: str | None
    timeout_s: float | None
    idempotency_key: str | None


class OutputOptions(ExecOptions, total=False):
    """The keywords of ``exec``: with a handler, the output is streamed to it as it comes.

    Attributes:
        on_stdout: receives each chunk of stdout.
        on_stderr: receives each chunk of stderr.
    """

    on_stdout: ChunkHandler | None
    on_stderr: ChunkHandler | None


def check_keywords(method: str, options: Mapping[str, object], allowed: type) -> None:
    """Refuse a keyword that the ``TypedDict`` ``allowed`` does not name, as Python
    refuses one a signature does not (a typo must not pass unnoticed)."""
    names: frozenset[str] = allowed.__required_keys__ | allowed.__optional_keys__  # type: ignore[attr-defined]
    for name in options:
        if name not in names:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")


def _deadline(timeout_s: float | None) -> float:
    """The HTTP wait of a turn with deadline ``timeout_s``."""
    return timeout_s + EXEC_MARGIN_S if timeout_s else EXEC_DEFAULT_WAIT_S


# ---- sessions -------------------------------------------------------------------------


def create_session(type: str = "python", **options: Unpack[SessionOptions]) -> Call[SessionInfo]:
    """Create a session; ``files`` are written before it is returned."""
    check_keywords("create_session", options, SessionOptions)
    files = options.get("files") or {}
    policy = options.get("network")
    spec = model(
        SessionCreate,
        type=type,
        quotas=options.get("quotas"),
        env=dict(options.get("env") or {}),
        files=[file_write(p, c, 0o644) for p, c in files.items()],
        snapshot_policy=options.get("snapshot_policy"),
        labels=dict(options.get("labels") or {}),
        fork_from=options.get("fork_from"),
        network=network_policy(policy) if policy is not None else None,
        on_idle=options.get("on_idle"),
    )
    body = spec.model_dump(mode="json", exclude_defaults=True)
    return Call("POST", "/v1/sessions", parse_as(SessionInfo), json=body)


def get_session(session_id: str) -> Call[SessionInfo]:
    """The session's state and spec."""
    return Call("GET", f"/v1/sessions/{session_id}", parse_as(SessionInfo))


def list_sessions() -> Call[list[SessionInfo]]:
    """The tenant's open sessions."""
    return Call("GET", "/v1/sessions", lambda r: parse_answer(SessionList, r.content).sessions)


def types() -> Call[list[SandboxTypeInfo]]:
    """The catalog's sandbox types, each with the live nodes that serve it."""
    return Call("GET", "/v1/types", lambda r: parse_answer(TypeList, r.content).types)


def close_session(session_id: str) -> Call[SessionInfo]:
    """Close the session on the grid; its container is destroyed."""
    return Call("DELETE", f"/v1/sessions/{session_id}", parse_as(SessionInfo))


def audit(
    *,
    session: str | None = None,
    since: float | None = None,
    limit: int | None = None,
    action: str | None = None,
    order: AuditOrder | None = None,
    cursor: str | None = None,
) -> Call[AuditPage]:
    """One page of the tenant's audit trail from ``since`` (epoch s), newest first
    (``order="asc"``: oldest first); pass the page's ``next_cursor`` as ``cursor``
    (same filters) for the next one, or iterate ``audit_records`` (docs/operations.md)."""
    params = {
        "session": session,
        "since": since,
        "limit": limit,
        "action": action,
        "order": order,
        "cursor": cursor,
    }
    kept = {k: v for k, v in params.items() if v is not None}
    return Call("GET", "/v1/audit", parse_as(AuditPage), params=kept)


def health() -> Call[dict[str, Any]]:
    """The grid's health (answered with 503 too, when a part is down)."""
    return Call("GET", "/v1/health", parse_json, accept=(503,))


# ---- turns ----------------------------------------------------------------------------


def command_request(argv: Argv, command: CommandOptions, **more: Any) -> ExecRequest:
    """The ``ExecRequest`` of a command, with ``more`` of its fields (an exec's stdin...)."""
    return model(
        ExecRequest,
        argv=list(argv) if argv is not None else None,
        shell=command.get("shell"),
        python=command.get("python"),
        env=dict(command.get("env") or {}),
        cwd=command.get("cwd"),
        **more,
    )


def exec_call(
    session_id: str, argv: Argv = None, **options: Unpack[OutputOptions]
) -> Call[ExecResult]:
    """One command (exactly one of ``argv``, ``shell``, ``python``), retried under its
    idempotency key; the output handlers in ``options`` are for the shell to call."""
    check_keywords("exec", options, OutputOptions)
    more = {"stdin": options.get("stdin"), "timeout_s": options.get("timeout_s")}
    request = command_request(argv, options, **more)
    body = request.model_dump(mode="json", exclude_defaults=True)
    key = options.get("idempotency_key") or uuid.uuid4().hex  # one per call, kept on retries
    return Call(
        "POST",
        f"/v1/sessions/{session_id}/exec",
        parse_as(ExecResult),
        json=body,
        headers={IDEMPOTENCY_HEADER: key},
        timeout=_deadline(request.timeout_s),
        idempotent=True,
    )


def exec_stream_call(
    session_id: str, argv: Argv = None, **options: Unpack[ExecOptions]
) -> Call[ExecResult]:
    """``exec_call`` asking for the turn's events as they happen (Server-Sent Events)."""
    check_keywords("exec_stream", options, ExecOptions)
    return streamed(exec_call(session_id, argv, **options))


def streamed(call: Call[ExecResult]) -> Call[ExecResult]:
    """An exec call that asks for the turn's events (Server-Sent Events)."""
    return dataclasses.replace(call, headers={**(call.headers or {}), "Accept": EVENT_STREAM})


def events_call(session_id: str, turn_id: str, after: str = "0") -> Call[None]:
    """Re-attach to a turn's events after offset ``after`` (``0``: all of them)."""
    path = f"/v1/sessions/{session_id}/turns/{turn_id}/events"
    return Call("GET", path, lambda r: None, params={"after": after})


def run_code(
    session_id: str, code: str, *, language: str = "python", timeout_s: float | None = None
) -> Call[CodeResult]:
    """Run code in the session's Jupyter kernel; variables and imports stay between calls.

    An error in the code is in ``result.error``; ``kernel_restarted`` says that the
    state of earlier calls is gone. Not retried once sent: code has effects.
    """
    request = model(CodeRequest, code=code, language=language, timeout_s=timeout_s)
    body = request.model_dump(mode="json", exclude_defaults=True)
    path = f"/v1/sessions/{session_id}/code"
    return Call("POST", path, parse_as(CodeResult), json=body, timeout=_deadline(timeout_s))


def cancel(session_id: str, turn_id: str) -> Call[TurnCancel]:
    """Cancel a turn by id: its processes are killed and its result says ``cancelled``;
    a finished turn is left alone (``state: finished``)."""
    path = f"/v1/sessions/{session_id}/turns/{turn_id}/cancel"
    return Call("POST", path, parse_as(TurnCancel), idempotent=True)
