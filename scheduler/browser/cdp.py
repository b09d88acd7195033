"""A small Chrome DevTools Protocol client over a port tunnel (docs/browser.md).

The API reaches the sandbox's DevTools port the way a caller of the port route
does (``scheduler.ports.tunnel.open_stream``: through the owning worker, no
network device in the sandbox). ``json_version`` asks Chromium's HTTP side for
its browser endpoint; ``CdpClient`` opens the browser's WebSocket on a fresh
tunnel and sends commands (flat sessions: a page's commands carry its
``sessionId``). Events are kept per method for the few waits the tools need.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from sandgrid.errors import PortUnreachable

__all__ = ["MAX_MESSAGE", "CdpClient", "CdpError", "browser_path", "cdp_session", "json_version"]

#: The biggest CDP message read (a full-page screenshot of a large page is a few MiB).
MAX_MESSAGE = 64 << 20
_MAX_HTTP = 64 << 10
_KEEP_EVENTS = 256
#: CDP is JSON text: no compression to negotiate; the tools' calls are short, no pings.
_WS_OPTIONS: dict[str, Any] = {"compression": None, "open_timeout": 10, "ping_interval": None}


class CdpError(Exception):
    """A CDP command answered an error, or the browser went away mid-command."""


def _unreachable(port: int, why: str) -> PortUnreachable:
    return PortUnreachable(
        f"the browser's DevTools endpoint on port {port} did not answer: {why}",
        operation="browser",
        context={"port": port, "reason": "cdp_unavailable"},
    )


async def json_version(sock: socket.socket, port: int, timeout: float = 5.0) -> dict[str, Any]:
    """``GET /json/version`` over the tunnel ``sock`` (closed after): the browser's identity.

    Raises:
        PortUnreachable: no HTTP answer, or not Chromium's (no JSON object).
    """
    loop = asyncio.get_running_loop()
    head = f"GET /json/version HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    buf = bytearray()
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_sendall(sock, head.encode())
            while len(buf) < _MAX_HTTP and not _complete(buf):
                chunk = await loop.sock_recv(sock, _MAX_HTTP)
                if not chunk:
                    break
                buf += chunk
    except (OSError, TimeoutError) as exc:
        raise _unreachable(port, repr(exc)) from exc
    finally:
        sock.close()
    _, _, body = bytes(buf).partition(b"\r\n\r\n")
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "webSocketDebuggerUrl" not in answer:
        raise _unreachable(port, "not a DevTools answer")
    return answer


def _complete(buf: bytearray) -> bool:
    """Whether ``buf`` holds a whole response (Chromium keeps the connection open)."""
    head, sep, body = bytes(buf).partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip() or b"0")
    return False


def browser_path(version: dict[str, Any]) -> str:
    """The path of the browser's WebSocket (``/devtools/browser/<id>``) in ``version``."""
    url = str(version["webSocketDebuggerUrl"])
    return "/" + url.split("://", 1)[-1].partition("/")[2]


@dataclass
class CdpClient:
    """One WebSocket to the browser; commands answered in order of their ids."""

    ws: ClientConnection
    page_target: str | None = None
    crashed: bool = False
    _next: int = 0
    _seen: list[dict[str, Any]] = field(default_factory=list)

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Send one command and wait for its answer (events met meanwhile are dropped).

        Raises:
            CdpError: the command's error, the browser closed, or no answer in time.
        """
        self._next += 1
        ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        try:
            async with asyncio.timeout(timeout):
                await self.ws.send(json.dumps(msg))
                while True:
                    answer = json.loads(await self.ws.recv())
                    if answer.get("id") == ident:
                        break
                    self._watch(answer)
                    if "method" in answer and len(self._seen) < _KEEP_EVENTS:
                        self._seen.append(answer)
        except TimeoutError as exc:
            raise CdpError(f"{method}: no answer from the browser in {timeout:g}s") from exc
        except ConnectionClosed as exc:
            raise CdpError(f"{method}: the browser closed the connection ({exc})") from exc
        if "error" in answer:
            err = answer["error"]
            raise CdpError(f"{method}: {err.get('message', err)}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def wait_event(self, method: str, *, timeout: float) -> dict[str, Any] | None:
        """The next event ``method``, or one met during a command since the last wait
        (None when none came in ``timeout`` seconds)."""
        for i, old in enumerate(self._seen):
            if old.get("method") == method:
                del self._seen[: i + 1]
                params: dict[str, Any] = old.get("params", {})
                return params
        try:
            async with asyncio.timeout(timeout):
                while True:
                    message = json.loads(await self.ws.recv())
                    self._watch(message)
                    if message.get("method") == method:
                        found: dict[str, Any] = message.get("params", {})
                        return found
        except TimeoutError:
            return None
        except ConnectionClosed as exc:
            raise CdpError(f"the browser closed the connection ({exc})") from exc

    def _watch(self, message: dict[str, Any]) -> None:
        """A renderer that died (the memory cap, a crash) fails the tool clearly."""
        if message.get("method") in ("Inspector.targetCrashed", "Target.targetCrashed"):
            self.crashed = True
            raise CdpError(
                "the page crashed (its renderer died: the page's memory cap or the "
                "session's memory quota); it is closed, the next call opens a new page"
            )


@contextlib.asynccontextmanager
async def cdp_session(sock: socket.socket, port: int, path: str) -> AsyncIterator[CdpClient]:
    """A ``CdpClient`` on the browser WebSocket ``path`` over the tunnel ``sock``.

    Raises:
        PortUnreachable: the WebSocket was refused.
    """
    try:
        uri = f"ws://127.0.0.1:{port}{path}"
        ws = await connect(uri, sock=sock, max_size=MAX_MESSAGE, **_WS_OPTIONS)
    except (InvalidHandshake, OSError, TimeoutError) as exc:
        sock.close()
        raise _unreachable(port, repr(exc)) from exc
    try:
        yield CdpClient(ws)
    finally:
        with contextlib.suppress(Exception):
            await ws.close()
