"""One WebSocket relayed to a sandbox port over a tunnel, message by message.

The caller's WebSocket ends at the API (Starlette's); the API opens its own to
the sandbox's server over the tunnel (the ``websockets`` client, given the
tunnel's socket), offering the caller's subprotocols (less the grid's own
``sandgrid.*`` ones, which may carry a token), and accepts the caller with
the one the server chose. Then every text and binary message goes across as
it is, each way, until either side closes; the close code travels too. A
refused open (the tunnel's error, or the server's refusal) is the API's error
body as one text frame, then close code 4000 + its HTTP status (4403, 4404,
4502...), as the terminal route does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from sandgrid.errors import PortUnreachable, SandgridError
from scheduler.ports.forward import upstream_target

__all__ = ["MAX_MESSAGE", "offered_subprotocols", "refuse", "relay_websocket"]

#: The biggest message relayed (a bigger one closes the socket, 1009).
MAX_MESSAGE = 16 << 20


def offered_subprotocols(websocket: WebSocket) -> list[str]:
    """What the caller offered, less the grid's own (``sandgrid.*``: a token may ride there)."""
    offered = list(websocket.scope.get("subprotocols") or [])
    return [p for p in offered if not p.startswith("sandgrid.")]


async def refuse(websocket: WebSocket, exc: SandgridError) -> None:
    """Accept, send the error body, close with 4000 + its status (the caller may be gone)."""
    with contextlib.suppress(Exception):
        await websocket.accept()
        await websocket.send_text(json.dumps({"type": "error", **exc.to_body()}))
        await websocket.close(code=4000 + exc.http_status)


async def _open(
    sock: socket.socket, port: int, target: str, protocols: list[str]
) -> ClientConnection:
    uri = f"ws://127.0.0.1:{port}{target}"
    try:
        return await connect(
            uri,
            sock=sock,
            subprotocols=protocols or None,  # type: ignore[arg-type]
            compression=None,
            max_size=MAX_MESSAGE,
            open_timeout=10,
            ping_interval=None,
        )
    except (InvalidHandshake, OSError, TimeoutError) as exc:
        sock.close()
        raise PortUnreachable(
            f"the server on port {port} refused the WebSocket: {exc}",
            operation="ports",
            context={"port": port, "reason": "websocket_refused"},
        ) from exc


async def relay_websocket(websocket: WebSocket, sock: socket.socket, port: int, path: str) -> None:
    """Relay the caller's WebSocket to ``path`` on the tunnel ``sock`` until either closes."""
    query = websocket.url.query
    try:
        target = upstream_target(path, query)
        upstream = await _open(sock, port, target, offered_subprotocols(websocket))
    except SandgridError as exc:
        await refuse(websocket, exc)
        return
    await websocket.accept(subprotocol=upstream.subprotocol)
    up = asyncio.create_task(_caller_to_server(websocket, upstream))
    down = asyncio.create_task(_server_to_caller(websocket, upstream))
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        with contextlib.suppress(Exception):
            await upstream.close()
        with contextlib.suppress(Exception):
            await websocket.close(code=upstream.close_code or 1000)


async def _caller_to_server(websocket: WebSocket, upstream: ClientConnection) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(code=int(message.get("code") or 1000))
                return
            if message.get("text") is not None:
                await upstream.send(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send(message["bytes"])


async def _server_to_caller(websocket: WebSocket, upstream: ClientConnection) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
        async for data in upstream:
            if isinstance(data, str):
                await websocket.send_text(data)
            else:
                await websocket.send_bytes(data)
