"""One HTTP request relayed to a sandbox port over a tunnel, streamed both ways.

The tunnel (``tunnel.open_stream``) is the port's own byte stream; httpcore's
HTTP/1.1 connection speaks over it (``_TunnelStream``, its network stream),
which opens the tunnel on httpcore's first write, the request's head, and sends
that head with the hello: the server has the request one round trip through
worker and agent sooner. A body follows only after the worker's ok (a retry on
another owner sends the head again; no body byte is lost), and streams up as
the client sends it; the response body streams down as the server writes
it: a 50 MB download or a chunked, slowly produced response is never held
whole. Hop-by-hop headers are dropped, and so are the caller's
``Authorization`` (the tenant's token never reaches the sandbox, nor the
worker with the head) and ``Cookie`` headers of the grid; the server sees
``Host: 127.0.0.1:<port>`` and ``X-Forwarded-*`` naming the public prefix.
One tunnel serves one request (a port's caps count requests in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpcore
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from sandgrid.errors import PortUnreachable

__all__ = [
    "HOP_BY_HOP",
    "WHOLE_MAX",
    "Opener",
    "forward_http",
    "request_headers",
    "response_headers",
    "upstream_target",
]

#: Opens the tunnel with these first bytes; the socket and the port's bytes read with
#: the worker's answer (``tunnel.open_stream``).
Opener = Callable[[bytes], Awaitable[tuple[socket.socket, bytes]]]

#: Never forwarded either way (RFC 9110 7.6.1), nor the caller's credentials.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
_CREDENTIALS = frozenset({"authorization"})
_READ = 256 << 10
#: A response whose Content-Length is at most this is read whole and answered at once
#: (a page's small files skip the streaming response and close their tunnel sooner).
WHOLE_MAX = 64 << 10
_BROKEN = (httpcore.ProtocolError, httpcore.NetworkError, httpcore.ReadError)


@contextlib.contextmanager
def _mapped(timeout: type[Exception], broken: type[Exception]) -> Iterator[None]:
    """The tunnel's socket errors as httpcore's own streams raise them. A write that
    fails (the server answered early and closed, RFC 9110 15.5.1) is a ``WriteError``,
    after which httpcore reads the answer; a raw ``OSError`` escaped it as a 500."""
    try:
        yield
    except TimeoutError as exc:  # an OSError too: first
        raise timeout(str(exc)) from exc
    except OSError as exc:
        raise broken(str(exc) or type(exc).__name__) from exc


class _TunnelStream(httpcore.AsyncNetworkStream):
    """httpcore's network stream over the tunnel's socket, opened by the first write with
    its bytes (the opener's errors, a 502 or a 429, reach the route as they are).

    The socket's errors become httpcore's own (``_mapped``). A write that fails leaves
    the socket open for reading: a server that answers early and closes with the body
    unread (RFC 9110 15.5.1: a 413, an ``http.server`` 501) resets the tunnel on the
    body's next write, and httpcore then reads the answer, which the kernel still holds.
    """

    def __init__(self, opener: Opener) -> None:
        self.opener = opener
        self.sock: socket.socket | None = None
        self.first = b""

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self.sock is None:
            return b""
        if self.first:
            out, self.first = self.first[:max_bytes], self.first[max_bytes:]
            return out
        loop = asyncio.get_running_loop()
        with _mapped(httpcore.ReadTimeout, httpcore.ReadError):
            async with asyncio.timeout(timeout):
                return await loop.sock_recv(self.sock, min(max_bytes, _READ))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self.sock is None:
            self.sock, self.first = await self.opener(buffer)
            return
        loop = asyncio.get_running_loop()
        with _mapped(httpcore.WriteTimeout, httpcore.WriteError):
            async with asyncio.timeout(timeout):
                await loop.sock_sendall(self.sock, buffer)

    async def aclose(self) -> None:
        if self.sock is not None:
            self.sock.close()

    def get_extra_info(self, info: str) -> Any:
        return None


#: What a path keeps as it is (RFC 3986 pchar and "/"); anything else is percent-encoded.
_PATH_SAFE = "/!$&'()*+,;=:@~"
#: A query is relayed as the caller sent it (already encoded), less what a target cannot hold.
_QUERY_SAFE = _PATH_SAFE + "%?"


def upstream_target(path: str, query: str) -> str:
    """The request target the sandbox's server gets: ``path`` (decoded by the route)
    percent-encoded again, and the caller's query; never a byte a request line cannot
    carry (a space, a control character, raw UTF-8), which h11 would refuse to send."""
    target = "/" + quote(path.lstrip("/"), safe=_PATH_SAFE)
    return target + ("?" + quote(query, safe=_QUERY_SAFE) if query else "")


def request_headers(request: Request, port: int, prefix: str) -> list[tuple[bytes, bytes]]:
    """The headers the sandbox's server gets: the caller's, less hop-by-hop and credentials."""
    out: list[tuple[bytes, bytes]] = [(b"host", f"127.0.0.1:{port}".encode())]
    chunked = False
    for name, value in request.headers.raw:
        low = name.decode("latin-1").lower()
        if low == "transfer-encoding":
            chunked = b"chunked" in value.lower()
        if low in HOP_BY_HOP or low in _CREDENTIALS or low.startswith("x-forwarded-"):
            continue
        out.append((name, value))
    if chunked and "content-length" not in request.headers:
        out.append((b"transfer-encoding", b"chunked"))
    out += [
        (b"x-forwarded-host", request.headers.get("host", "").encode("latin-1")),
        (b"x-forwarded-proto", request.url.scheme.encode()),
        (b"x-forwarded-prefix", quote(prefix, safe=_PATH_SAFE).encode()),  # ids decoded too
    ]
    return out


def response_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The server's headers the caller gets: all but the hop-by-hop ones."""
    return [(k.lower(), v) for k, v in headers if k.decode("latin-1").lower() not in HOP_BY_HOP]


def _small(response: httpcore.Response) -> bool:
    length = next((v for k, v in response.headers if k.lower() == b"content-length"), b"")
    return length.isdigit() and int(length) <= WHOLE_MAX


def _has_body(request: Request) -> bool:
    te = request.headers.get("transfer-encoding", "")
    return "chunked" in te.lower() or int(request.headers.get("content-length") or 0) > 0


async def forward_http(
    request: Request, opener: Opener, port: int, prefix: str, path: str
) -> Response:
    """Relay ``request`` to ``path`` on the tunnel ``opener`` opens; the response streams back.

    Raises:
        PortUnreachable: the server closed the connection without an answer.
        SandgridError: the opener's (``tunnel.open_stream``).
    """
    conn = httpcore.AsyncHTTP11Connection(
        httpcore.Origin(b"http", b"127.0.0.1", port), _TunnelStream(opener)
    )
    target = upstream_target(path, request.url.query)
    upstream = httpcore.Request(
        request.method,
        httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port, target=target.encode()),
        headers=request_headers(request, port, prefix),
        content=request.stream() if _has_body(request) else None,
    )
    try:
        response = await conn.handle_async_request(upstream)
        if _small(response):
            try:
                content = await response.aread()
            finally:
                await response.aclose()
                await conn.aclose()
            whole = Response(content, status_code=response.status)
            whole.raw_headers = response_headers(list(response.headers))
            return whole
    except _BROKEN as exc:
        await conn.aclose()
        raise PortUnreachable(
            f"the server on port {port} closed the connection without an answer",
            operation="ports",
            context={"port": port, "reason": "no_answer"},
        ) from exc

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_stream():
                yield chunk
        finally:
            await response.aclose()
            await conn.aclose()

    out = StreamingResponse(body(), status_code=response.status)
    out.raw_headers = response_headers(list(response.headers))  # its length, if it named one
    return out
