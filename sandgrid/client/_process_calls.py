"""The SDK's pure half for background processes: one request builder per call.

Each builder is the one definition of its method (on the clients, the sessions
and the process handles: the method tables list them). A start is not retried
once it may have reached the API (it would start a second process); the quick
calls are reads or steer one process and are GET or carry no side effect worth
a key, so they follow the usual retry rules. ``Waiting`` is the pure half of
``wait``: the steps, not the sleeping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Unpack, cast

import httpx

from sandgrid.client._call import Call, model, parse_answer, parse_as
from sandgrid.client._requests import (
    Argv,
    CommandOptions,
    OutputOptions,
    check_keywords,
    command_request,
)
from sandgrid.errors import ErrorCode, InvalidInput, SandgridError
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
    "BUSY_PAUSE_S",
    "ProcessRef",
    "Waiting",
    "background_command",
    "check_background",
    "kill_call",
    "list_call",
    "logs_call",
    "start_call",
    "stdin_call",
    "wait_call",
    "wait_step",
]

BUSY_PAUSE_S = 0.2
"""How long ``wait`` pauses when another turn of the session holds it."""


@dataclass(frozen=True)
class ProcessRef:
    """Where a background process is: its session, its pid, the sandbox it runs in."""

    session_id: str
    pid: int
    sandbox: str = ""

    def path(self, what: str) -> str:
        return f"{_path(self.session_id)}/{self.pid}/{what}"

    def params(self, **more: Any) -> dict[str, Any]:
        return {**more, **({"sandbox": self.sandbox} if self.sandbox else {})}


def _path(session_id: str) -> str:
    return f"/v1/sessions/{session_id}/processes"


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


def background_command(options: OutputOptions) -> CommandOptions:
    """What ``exec(..., background=True)`` starts: the command of an exec's ``options``
    (its ``stdin`` is sent once it runs; no deadline, no key)."""
    check_keywords("exec", options, OutputOptions)
    check_background(options.get("timeout_s"), options.get("idempotency_key"))
    names = CommandOptions.__optional_keys__
    return cast(CommandOptions, {k: v for k, v in options.items() if k in names})


def start_call(
    session_id: str, argv: Argv = None, **command: Unpack[CommandOptions]
) -> Call[ProcessInfo]:
    """Start a command in the background; answers at once with its handle."""
    check_keywords("start_process", command, CommandOptions)
    body = command_request(argv, command).model_dump(mode="json", exclude_defaults=True)
    return Call("POST", _path(session_id), parse_as(ProcessInfo), json=body)


def list_call(session_id: str) -> Call[list[ProcessInfo]]:
    """The session's background processes, running or finished."""

    def parse(r: httpx.Response) -> list[ProcessInfo]:
        return parse_answer(ProcessList, r.content).processes

    return Call("GET", _path(session_id), parse)


def logs_call(ref: ProcessRef, since: int = 0) -> Call[ProcessLogs]:
    """Its output (stdout and stderr merged) from the absolute offset ``since``;
    read on from the answer's ``offset``; ``skipped`` counts dropped bytes."""
    return Call("GET", ref.path("logs"), parse_as(ProcessLogs), params=ref.params(since=since))


def stdin_call(ref: ProcessRef, data: str, *, eof: bool = False) -> Call[int]:
    """Write ``data`` to its stdin (``eof`` closes it); the bytes it took."""
    body = model(ProcessStdin, data=data, eof=eof).model_dump(mode="json")
    return Call(
        "POST",
        ref.path("stdin"),
        lambda r: int(r.json()["written"]),
        json=body,
        params=ref.params(),
    )


def kill_call(ref: ProcessRef, signal: str) -> Call[ProcessInfo]:
    body = model(ProcessKill, signal=signal).model_dump(mode="json")
    return Call("POST", ref.path("kill"), parse_as(ProcessInfo), json=body, params=ref.params())


def wait_call(ref: ProcessRef, timeout_s: float) -> Call[ProcessInfo]:
    body = model(ProcessWait, timeout_s=timeout_s).model_dump(mode="json")
    return Call(
        "POST",
        ref.path("wait"),
        parse_as(ProcessInfo),
        json=body,
        params=ref.params(),
        timeout=timeout_s + 60.0,
        idempotent=True,  # waiting changes nothing
    )


def wait_step(left: float | None) -> float:
    """The timeout of the next bounded wait call: what is left, at most ``MAX_PROC_WAIT_S``."""
    return MAX_PROC_WAIT_S if left is None else max(min(left, MAX_PROC_WAIT_S), 0.0)


class Waiting:
    """The steps of ``wait``: bounded waits (no call holds one of the session's turn
    slots more than ``MAX_PROC_WAIT_S``) until the process ends or ``timeout``
    passes (None: no limit); a session with no free slot meanwhile
    (429 ``session_busy``) only delays the next step."""

    def __init__(self, ref: ProcessRef, timeout: float | None) -> None:
        self.ref = ref
        self.end = None if timeout is None else time.monotonic() + timeout

    def _left(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def call(self) -> Call[ProcessInfo]:
        """The next bounded wait."""
        return wait_call(self.ref, wait_step(self._left()))

    def pause(self, error: SandgridError) -> float:
        """How long to pause after ``error`` of a wait call; any error but a busy
        session is raised."""
        if error.code != ErrorCode.SESSION_BUSY:
            raise error
        return BUSY_PAUSE_S

    def done(self, info: ProcessInfo) -> bool:
        """Whether to answer ``info``: the process ended, or the time is up."""
        left = self._left()
        return not info.running or (left is not None and left <= 0)
