"""The SDK's pure half for background processes: one request builder per call.

Beside ``_base`` (whose builders serve the other calls) so that the shells
(``Client``, ``AsyncClient``) send what these return and cannot drift. A start
is not retried once it may have reached the API (it would start a second
process); the quick calls are reads or steer one process and are GET or
carry no side effect worth a key, so they follow the usual retry rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from sandgrid.client._base import Call, _model, _parse
from sandgrid.errors import InvalidInput
from sandgrid.models import ExecRequest
from sandgrid.processes import (
    MAX_PROC_WAIT_S,
    ProcessInfo,
    ProcessKill,
    ProcessList,
    ProcessLogs,
    ProcessStdin,
    ProcessWait,
)

__all__ = [
    "check_background",
    "kill_call",
    "list_call",
    "logs_call",
    "start_call",
    "stdin_call",
    "wait_call",
    "wait_step",
]


def _path(session_id: str, pid: int | None = None, what: str = "") -> str:
    base = f"/v1/sessions/{session_id}/processes"
    return base if pid is None else f"{base}/{pid}/{what}"


def _params(sandbox: str | None, **more: Any) -> dict[str, Any]:
    return {**more, **({"sandbox": sandbox} if sandbox else {})}


def check_background(timeout_s: float | None, idempotency_key: str | None) -> None:
    """Refuse the exec arguments a background process cannot honour."""
    for name, value in (("timeout_s", timeout_s), ("idempotency_key", idempotency_key)):
        if value is not None:
            raise InvalidInput(
                f"{name}: not allowed with background=True (a background process runs "
                "until it ends or is killed, and a start is never repeated)",
                operation="exec",
                context={"field": name, "rule": "not with background=True"},
            )


def start_call(
    session_id: str,
    argv: Sequence[str] | None,
    shell: str | None,
    python: str | None,
    env: Mapping[str, str] | None,
    cwd: str,
) -> Call[ProcessInfo]:
    request = _model(
        ExecRequest,
        argv=list(argv) if argv is not None else None,
        shell=shell,
        python=python,
        env=dict(env or {}),
        cwd=cwd,
    )
    body = request.model_dump(mode="json", exclude_defaults=True)
    return Call("POST", _path(session_id), _parse(ProcessInfo), json=body)


def list_call(session_id: str) -> Call[list[ProcessInfo]]:
    def parse(r: httpx.Response) -> list[ProcessInfo]:
        return ProcessList.model_validate_json(r.content).processes

    return Call("GET", _path(session_id), parse)


def logs_call(session_id: str, pid: int, sandbox: str | None, since: int) -> Call[ProcessLogs]:
    params = _params(sandbox, since=since)
    return Call("GET", _path(session_id, pid, "logs"), _parse(ProcessLogs), params=params)


def stdin_call(session_id: str, pid: int, sandbox: str | None, data: str, eof: bool) -> Call[int]:
    body = _model(ProcessStdin, data=data, eof=eof).model_dump(mode="json")
    path = _path(session_id, pid, "stdin")
    return Call(
        "POST", path, lambda r: int(r.json()["written"]), json=body, params=_params(sandbox)
    )


def kill_call(session_id: str, pid: int, sandbox: str | None, signal: str) -> Call[ProcessInfo]:
    body = _model(ProcessKill, signal=signal).model_dump(mode="json")
    path = _path(session_id, pid, "kill")
    return Call("POST", path, _parse(ProcessInfo), json=body, params=_params(sandbox))


def wait_call(
    session_id: str, pid: int, sandbox: str | None, timeout_s: float
) -> Call[ProcessInfo]:
    body = _model(ProcessWait, timeout_s=timeout_s).model_dump(mode="json")
    path = _path(session_id, pid, "wait")
    return Call(
        "POST",
        path,
        _parse(ProcessInfo),
        json=body,
        params=_params(sandbox),
        timeout=timeout_s + 60.0,
        idempotent=True,  # waiting changes nothing
    )


def wait_step(left: float | None) -> float:
    """The timeout of the next bounded wait call: what is left, at most ``MAX_PROC_WAIT_S``."""
    return MAX_PROC_WAIT_S if left is None else max(min(left, MAX_PROC_WAIT_S), 0.0)
