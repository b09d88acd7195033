"""The request's head goes with the hello, and the port's answer read with the worker's
is the response's start (issue 21: one round trip less per request).

The tunnel is a socket pair here: the opener stands for ``tunnel.open_stream``.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import httpcore
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from sandgrid.errors import PortUnreachable
from scheduler.ports import forward

ORIGIN = httpcore.Origin(b"http", b"127.0.0.1", 8000)


def _get() -> httpcore.Request:
    return httpcore.Request(
        "GET", "http://127.0.0.1:8000/small.txt", headers=[(b"host", b"127.0.0.1:8000")]
    )


def test_the_head_opens_the_tunnel_and_the_bytes_read_with_the_answer_come_first() -> None:
    api, port = socket.socketpair()
    api.setblocking(False)
    early: list[bytes] = []

    async def opener(head: bytes) -> tuple[socket.socket, bytes]:
        early.append(head)
        port.sendall(b"llo")  # the rest of the body, after what came with the answer
        return api, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe"

    async def main() -> bytes:
        conn = httpcore.AsyncHTTP11Connection(ORIGIN, forward._TunnelStream(opener))
        response = await conn.handle_async_request(_get())
        body = await response.aread()
        await conn.aclose()
        return body

    assert asyncio.run(main()) == b"hello"
    (head,) = early
    assert head.startswith(b"GET /small.txt HTTP/1.1\r\n") and head.endswith(b"\r\n\r\n")
    assert port.recv(100) == b""  # nothing but the head was sent, and then the close
    port.close()


def test_a_refusal_of_the_opener_reaches_the_caller_as_it_is() -> None:
    async def opener(head: bytes) -> tuple[socket.socket, bytes]:
        raise PortUnreachable("nothing is listening on port 8000", context={"port": 8000})

    async def main() -> None:
        conn = httpcore.AsyncHTTP11Connection(ORIGIN, forward._TunnelStream(opener))
        await conn.handle_async_request(_get())

    with pytest.raises(PortUnreachable, match="nothing is listening"):
        asyncio.run(main())


def _scope(method: str, path: str, header: tuple[bytes, bytes]) -> dict[str, object]:
    """The ASGI scope of a request to ``path`` on port 8000 of session s-1, with ``header``."""
    return {
        "type": "http",
        "method": method,
        "path": f"/v1/sessions/s-1/ports/8000/{path}",
        "query_string": b"",
        "headers": [(b"host", b"api"), header],
        "scheme": "http",
        "server": ("api", 80),
    }


def _request() -> Request:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    return Request(_scope("GET", "f", (b"authorization", b"Bearer tok")), receive)


@pytest.mark.parametrize("size", [512, forward.WHOLE_MAX + 1])
def test_a_small_answer_is_read_whole_and_a_big_one_streams(size: int) -> None:
    api, port = socket.socketpair()
    api.setblocking(False)
    heads: list[bytes] = []

    async def opener(head: bytes) -> tuple[socket.socket, bytes]:
        heads.append(head)
        return api, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size

    def serve() -> None:
        port.sendall(b"x" * size)

    async def main() -> tuple[Response, bytes]:
        out = await forward.forward_http(_request(), opener, 8000, "/p", "f")
        if not isinstance(out, StreamingResponse):
            return out, bytes(out.body)
        return out, b"".join([bytes(chunk) async for chunk in out.body_iterator])

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    out, body = asyncio.run(main())
    server.join(10)
    assert isinstance(out, StreamingResponse) == (size > forward.WHOLE_MAX)
    assert body == b"x" * size
    assert (b"content-length", str(size).encode()) in out.raw_headers
    assert b"authorization" not in heads[0].lower()  # the head that went early: no token
    port.close()


def _post(body_after: threading.Event) -> Request:
    """A POST that names a long body, sends 100 bytes of it once ``body_after`` is set,
    and then never more (a client holding its request half-open)."""
    sent: list[bool] = []

    async def receive() -> dict[str, object]:
        if not sent:
            while not body_after.is_set():
                await asyncio.sleep(0.01)
            sent.append(True)
            return {"type": "http.request", "body": b"x" * 100, "more_body": True}
        await asyncio.Event().wait()  # never: the rest of the body does not come
        raise AssertionError

    return Request(_scope("POST", "slow", (b"content-length", b"1000000")), receive)


def test_a_server_that_answers_before_the_body_and_closes_is_no_internal_error() -> None:
    """``http.server`` answers a POST it has no handler for (501) on the head alone and
    closes: the body's next write fails. The caller gets the server's answer, not an
    ``OSError`` out of the route (a 500)."""
    api, port = socket.socketpair()
    api.setblocking(False)
    closed = threading.Event()

    async def opener(head: bytes) -> tuple[socket.socket, bytes]:
        api.send(head)  # as the worker relays the head sent with the hello
        return api, b""

    def serve() -> None:
        port.recv(65536)
        port.sendall(b"HTTP/1.1 501 Unsupported\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        port.close()
        closed.set()

    async def main() -> int:
        out = await forward.forward_http(_post(closed), opener, 8000, "/p", "slow")
        return out.status_code

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    assert asyncio.run(asyncio.wait_for(main(), 10)) == 501
    server.join(10)


def _head_sent(prefix: str, path: str) -> bytes:
    """The head ``forward_http`` sends for a GET of ``path`` under ``prefix`` (answered 204)."""
    api, port = socket.socketpair()
    api.setblocking(False)
    heads: list[bytes] = []

    async def opener(head: bytes) -> tuple[socket.socket, bytes]:
        heads.append(head)
        return api, b"HTTP/1.1 204 No Content\r\n\r\n"

    out = asyncio.run(forward.forward_http(_request(), opener, 8000, prefix, path))
    port.close()
    assert out.status_code == 204
    return heads[0]


@pytest.mark.parametrize(
    ("path", "query", "target"),
    [
        ("f", "", "/f"),
        ("a b/\x1e\u00e2", "", "/a%20b/%1E%C3%A2"),  # what h11 cannot send, encoded again
        ("100%/x;y=1", "q=%C3%A2&r", "/100%25/x;y=1?q=%C3%A2&r"),  # the query as it came
        ("sp ace", "a b", "/sp%20ace?a%20b"),
    ],
)
def test_a_decoded_path_reaches_the_server_as_a_valid_target(
    path: str, query: str, target: str
) -> None:
    assert forward.upstream_target(path, query) == target
    head = _head_sent("/p", path)
    assert head.startswith(f"GET {forward.upstream_target(path, '')} HTTP/1.1\r\n".encode())


def test_a_prefix_holding_a_decoded_session_id_is_a_valid_header() -> None:
    head = _head_sent("/v1/sessions/a\nb\u00e2/ports/8000", "f")  # as the route decoded it
    assert b"x-forwarded-prefix: /v1/sessions/a%0Ab%C3%A2/ports/8000\r\n" in head
