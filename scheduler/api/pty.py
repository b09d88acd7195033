"""``WS /v1/sessions/{id}/pty``: an interactive terminal on a session, over a WebSocket.

Authenticated with the tenant's token, never in the URL (URLs are logged): the
``Authorization: Bearer`` header, or, for browsers, the subprotocol
``sandgrid.bearer.<token>`` offered beside ``sandgrid.v1`` (the server answers
``sandgrid.v1``, never the token). A ``token`` query parameter is refused
(4401, ``rule: never in the URL``) so that old clients learn why. Query
parameters ``rows``, ``cols``, ``term``, ``idle_s`` and ``max_s`` shape the
terminal (``sandgrid.wire.jobs.PtyOp`` has their rules). The messages are those
of ``sandgrid.terminal``; a refused open gets ``{"type": "error", "error":
{...}}`` (the API's error body) and then closes with code 4000 + the HTTP status
of the error (4401, 4404, 4409, 4429...). A frame the protocol does not expect
gets the same error frame, then closes the terminal: 1003 for a binary frame,
4422 for a bad message.

The route sends the terminal as a turn (``scheduler.turns.terminal``), then pumps
the turn's two Redis Streams with the async Redis client: no thread is held
for the socket's life, only for the few milliseconds of the send and the end.
However the client goes (hang-up, dropped connection, bad frame), the input
pump's last act is the ``close`` entry: the worker's terminal ends at once, and
the session's turn lock is released when its result is in (at most
``HANGUP_WAIT_S`` later).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, WebSocket
from starlette.concurrency import run_in_threadpool

from sandgrid.errors import AuthError, InvalidInput, SandgridError
from sandgrid.terminal import (
    BEARER_PREFIX,
    CLOSE_BAD_MESSAGE,
    CLOSE_UNSUPPORTED_FRAME,
    SUBPROTOCOL,
    exit_message,
    parse_client_message,
    stdout_message,
)
from sandgrid.wire import names, redis_connect
from scheduler.api.deps import Services
from scheduler.api.stream_slots import Slot, StreamSlots
from scheduler.tenants import Tenant
from scheduler.turns.terminal import TerminalTurn, open_terminal, outcome_error

__all__ = [
    "HANGUP_WAIT_S",
    "IN_MAXLEN",
    "IN_TTL_S",
    "READ_BLOCK_MS",
    "pty_socket",
    "router",
    "ws_tenant",
]

router = APIRouter(prefix="/v1/sessions", tags=["terminal"])

IN_MAXLEN = 1024
"""Entries kept in a terminal's input stream."""
IN_TTL_S = 300
"""Seconds an input stream outlives its last write (the worker reads it at once)."""
READ_BLOCK_MS = 1000
"""One blocking read of the output stream; between reads the turn's result is checked."""
HANGUP_WAIT_S = 30.0
"""After the client went, how long the terminal's exit is awaited before the lock is let go."""
_PARAMS = ("rows", "cols", "term", "idle_s", "max_s")


@router.websocket("/{session_id}/pty")
async def pty_socket(websocket: WebSocket, session_id: str) -> None:
    """Open a terminal on the session and relay it until the shell exits or the client leaves."""
    svc: Services = websocket.app.state.services
    offered = list(websocket.scope.get("subprotocols") or [])
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    client: aioredis.Redis[str] = redis_connect.connect_async(
        svc.settings.redis_url, decode_responses=True
    )
    slots = StreamSlots(svc.settings.streams)
    slot: Slot | None = None
    try:
        try:
            tenant = await ws_tenant(websocket, svc, offered)
            params = {k: v for k, v in websocket.query_params.items() if k in _PARAMS}
            slot = await slots.aacquire(client, "terminal", tenant.name, session_id)
            turn = await run_in_threadpool(open_terminal, svc.runner, tenant, session_id, params)
        except SandgridError as exc:
            await _refuse(websocket, exc, 4000 + exc.http_status)
            return
        try:
            await _serve(websocket, client, turn, slots, slot)
        finally:
            with contextlib.suppress(Exception):
                await _await_result(client, turn)
            await run_in_threadpool(turn.finish)
    finally:
        if slot is not None:
            await slots.arelease(client, slot)
        await client.aclose()  # type: ignore[attr-defined]


def _token(websocket: WebSocket, offered: list[str], operation: str) -> str:
    """The bearer token of the socket's header or subprotocol; never its URL.

    Raises:
        AuthError: a token in the query string, a malformed header, or none at all.
    """
    if "token" in websocket.query_params:
        raise AuthError(
            "a token in the URL (?token=) is refused: URLs are logged; send it in the "
            f"'Authorization: Bearer' header or the subprotocol '{BEARER_PREFIX}<token>' "
            f"offered with '{SUBPROTOCOL}'",
            operation=operation,
            context={"field": "token", "rule": "never in the URL"},
        )
    header = websocket.headers.get("authorization")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise AuthError("Authorization must be 'Bearer <token>'", operation=operation)
        return value.strip()
    for protocol in offered:
        if protocol.startswith(BEARER_PREFIX) and len(protocol) > len(BEARER_PREFIX):
            return protocol[len(BEARER_PREFIX) :]
    raise AuthError(
        f"missing token: send 'Authorization: Bearer <token>' or offer the subprotocols "
        f"'{BEARER_PREFIX}<token>' and '{SUBPROTOCOL}'",
        operation=operation,
    )


async def ws_tenant(
    websocket: WebSocket, svc: Services, offered: list[str], *, operation: str = "pty"
) -> Tenant:
    """The tenant of a WebSocket's token (header or subprotocol; the port route uses it too)."""
    token = _token(websocket, offered, operation)
    cached = svc.tenants.from_cache(token)
    if cached is not None:
        return cached
    return await run_in_threadpool(svc.tenants.authenticate, token)


async def _refuse(websocket: WebSocket, exc: SandgridError, code: int) -> None:
    """Send the error frame, then close with ``code`` (the client may be gone already)."""
    with contextlib.suppress(Exception):
        await websocket.send_text(json.dumps({"type": "error", **exc.to_body()}))
    with contextlib.suppress(Exception):
        await websocket.close(code=code)


async def _serve(
    websocket: WebSocket,
    client: aioredis.Redis[str],
    turn: TerminalTurn,
    slots: StreamSlots,
    slot: Slot,
) -> None:
    inbound = asyncio.create_task(_client_to_stream(websocket, client, turn))
    try:
        code, reason, message = await _stream_to_client(
            websocket, client, turn, inbound, slots, slot
        )
        if not inbound.done():
            with contextlib.suppress(Exception):
                await websocket.send_text(exit_message(code, reason, message))
                await websocket.close()
    finally:
        inbound.cancel()
        with contextlib.suppress(BaseException):
            await inbound


_Refusal = tuple[InvalidInput, int]


def _frame_refusal(message: Mapping[str, Any]) -> tuple[dict[str, Any] | None, _Refusal | None]:
    """A received WebSocket message: (the client message, None) or (None, (error, close code))."""
    if message.get("bytes") is not None:
        err = InvalidInput(
            "terminal message: frame must be a JSON text frame, not binary",
            operation="pty",
            context={"field": "frame", "rule": "a JSON text frame"},
        )
        return None, (err, CLOSE_UNSUPPORTED_FRAME)
    try:
        return parse_client_message(message.get("text") or ""), None
    except InvalidInput as exc:
        return None, (exc, CLOSE_BAD_MESSAGE)


async def _client_to_stream(
    websocket: WebSocket, client: aioredis.Redis[str], turn: TerminalTurn
) -> None:
    """Client frames -> the input stream; whatever ends it, the terminal is told to close."""
    key = names.pty_in_key(turn.job.turn_id)
    try:
        while True:
            message = await websocket.receive()
            if message["type"] != "websocket.receive":
                return  # websocket.disconnect: a hang-up or a dropped connection
            msg, refusal = _frame_refusal(message)
            if refusal is not None:
                await _refuse(websocket, *refusal)
                return
            assert msg is not None
            entry = {"t": "stdin", "d": msg["data"]} if msg["type"] == "stdin" else msg
            entry = {"t": "resize", **_strs(msg)} if msg["type"] == "resize" else entry
            await _add(client, key, entry)
    finally:
        with contextlib.suppress(Exception):
            await _add(client, key, {"t": "close"})


async def _add(client: aioredis.Redis[str], key: str, entry: dict[str, Any]) -> None:
    async with client.pipeline(transaction=False) as pipe:
        pipe.xadd(key, entry, maxlen=IN_MAXLEN, approximate=True)
        pipe.expire(key, IN_TTL_S)
        await pipe.execute()


def _strs(msg: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in msg.items() if k != "type"}


async def _stream_to_client(
    websocket: WebSocket,
    client: aioredis.Redis[str],
    turn: TerminalTurn,
    inbound: asyncio.Task[None],
    slots: StreamSlots,
    slot: Slot,
) -> tuple[int | None, str, str]:
    """The output stream -> the client, until its exit entry; (code, reason, message).

    Once the client went (``inbound`` done), the exit is awaited ``HANGUP_WAIT_S`` at most.
    """
    key, last = names.pty_out_key(turn.job.turn_id), "0-0"
    deadline = time.monotonic() + turn.op.max_s + turn.runner.turn_margin_s
    hung_up = False
    while time.monotonic() < deadline:
        if inbound.done() and not hung_up:
            hung_up, deadline = True, min(deadline, time.monotonic() + HANGUP_WAIT_S)
        await slots.arenew_due(client, slot)
        got = await client.xread({key: last}, count=256, block=READ_BLOCK_MS)
        for _key, entries in got or []:
            for entry_id, entry in entries:
                last = entry_id
                if entry.get("t") == "exit":
                    code = entry.get("code", "")
                    reason = entry.get("reason", "exited")
                    return (int(code) if code else None), reason, entry.get("message", "")
                if not inbound.done():
                    with contextlib.suppress(Exception):
                        await websocket.send_text(stdout_message(entry.get("d", "")))
        if not got and turn.result_key is not None:
            raw = await client.get(turn.result_key)
            if raw is not None and not await client.xlen(key):
                err = outcome_error(raw)
                return None, "error", err.message if err else "the terminal ended"
    return None, "error", "no answer from the terminal's worker in time"


async def _await_result(client: aioredis.Redis[str], turn: TerminalTurn) -> None:
    """Wait (bounded) for the turn's result: the worker saved the workspace and let go."""
    if turn.result_key is None:
        return
    end = time.monotonic() + HANGUP_WAIT_S
    while time.monotonic() < end and await client.get(turn.result_key) is None:
        await asyncio.sleep(0.1)
