"""``WS /v1/sessions/{id}/pty``: an interactive terminal on a session, over a WebSocket.

Authenticated with the tenant's token: the ``Authorization: Bearer`` header,
or a ``token`` query parameter for clients that cannot set headers (browsers).
Query parameters ``rows``, ``cols``, ``term``, ``idle_s`` and ``max_s`` shape
the terminal (``sandgrid.wire.jobs.PtyOp`` has their rules). The messages are
those of ``sandgrid.terminal``; a refused open or a bad message gets
``{"type": "error", "error": {...}}`` (the API's error body), and a refused
open then closes with code 4000 + the HTTP status of the error (4401, 4404, 4409...).

The route sends the terminal as a turn (``scheduler.turns.terminal``), then pumps
the turn's two Redis Streams with the async Redis client: no thread is held
for the socket's life, only for the few milliseconds of the send and the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool

from sandgrid.errors import AuthError, SandgridError
from sandgrid.terminal import exit_message, parse_client_message, stdout_message
from sandgrid.wire import names
from scheduler.api.deps import Services
from scheduler.tenants import Tenant
from scheduler.turns.terminal import TerminalTurn, open_terminal, outcome_error

__all__ = ["IN_MAXLEN", "IN_TTL_S", "READ_BLOCK_MS", "pty_socket", "router"]

router = APIRouter(prefix="/v1/sessions", tags=["terminal"])

IN_MAXLEN = 1024
"""Entries kept in a terminal's input stream."""
IN_TTL_S = 300
"""Seconds an input stream outlives its last write (the worker reads it at once)."""
READ_BLOCK_MS = 1000
"""One blocking read of the output stream; between reads the turn's result is checked."""
_END_WAIT_S = 30.0
_PARAMS = ("rows", "cols", "term", "idle_s", "max_s")


@router.websocket("/{session_id}/pty")
async def pty_socket(websocket: WebSocket, session_id: str) -> None:
    """Open a terminal on the session and relay it until the shell exits or the client leaves."""
    svc: Services = websocket.app.state.services
    await websocket.accept()
    try:
        tenant = await _tenant(websocket, svc)
        params = {k: v for k, v in websocket.query_params.items() if k in _PARAMS}
        turn = await run_in_threadpool(open_terminal, svc.runner, tenant, session_id, params)
    except SandgridError as exc:
        await websocket.send_text(json.dumps({"type": "error", **exc.to_body()}))
        await websocket.close(code=4000 + exc.http_status)
        return
    client: aioredis.Redis[str] = aioredis.Redis.from_url(
        svc.settings.redis_url, decode_responses=True
    )
    try:
        await _serve(websocket, client, turn)
    finally:
        with contextlib.suppress(Exception):
            await _await_result(client, turn)
        await run_in_threadpool(turn.finish)
        await client.aclose()  # type: ignore[attr-defined]


async def _tenant(websocket: WebSocket, svc: Services) -> Tenant:
    header = websocket.headers.get("authorization")
    token = header or websocket.query_params.get("token")
    if not token:
        raise AuthError("missing token: send 'Authorization: Bearer <token>' or ?token=")
    cached = svc.tenants.from_cache(token)
    if cached is not None:
        return cached
    return await run_in_threadpool(svc.tenants.authenticate, token)


async def _serve(websocket: WebSocket, client: aioredis.Redis[str], turn: TerminalTurn) -> None:
    inbound = asyncio.create_task(_client_to_stream(websocket, client, turn))
    try:
        code, reason, message = await _stream_to_client(websocket, client, turn, inbound)
        with contextlib.suppress(Exception):
            await websocket.send_text(exit_message(code, reason, message))
            await websocket.close()
    finally:
        inbound.cancel()
        with contextlib.suppress(BaseException):
            await inbound


async def _client_to_stream(
    websocket: WebSocket, client: aioredis.Redis[str], turn: TerminalTurn
) -> None:
    """Client frames -> the input stream; a hang-up closes the terminal."""
    key = names.pty_in_key(turn.job.turn_id)
    try:
        while True:
            raw = await websocket.receive_text()
            try:
                msg = parse_client_message(raw)
            except SandgridError as exc:
                await websocket.send_text(json.dumps({"type": "error", **exc.to_body()}))
                continue
            entry = {"t": "stdin", "d": msg["data"]} if msg["type"] == "stdin" else msg
            entry = {"t": "resize", **_strs(msg)} if msg["type"] == "resize" else entry
            await _add(client, key, entry)
    except (WebSocketDisconnect, RuntimeError):
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
) -> tuple[int | None, str, str]:
    """The output stream -> the client, until its exit entry; (code, reason, message)."""
    key, last = names.pty_out_key(turn.job.turn_id), "0-0"
    deadline = time.monotonic() + turn.op.max_s + turn.runner.turn_margin_s
    while time.monotonic() < deadline:
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
    end = time.monotonic() + _END_WAIT_S
    while time.monotonic() < end and await client.get(turn.result_key) is None:
        await asyncio.sleep(0.1)
