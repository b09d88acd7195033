"""The egress proxy's side of the three protocols: read a request, answer it.

Told apart by the first byte on the socket:

* ``0x05``: SOCKS5 (``ALL_PROXY=socks5h://``), CONNECT only, no authentication;
  a refusal is reply code 2 ("connection not allowed by ruleset").
* ``CONNECT host:port HTTP/1.1``: a tunnel (HTTPS through ``HTTPS_PROXY``).
* ``GET http://host[:port]/path HTTP/1.1``: plain HTTP proxying; the request is
  sent on in origin form with ``Connection: close``, one request per connection.

An HTTP refusal is ``403`` whose reason phrase and body say
``egress to HOST:PORT denied: REASON``, so pip, git and curl print it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Refused", "Target", "accept", "denial", "read_target", "refuse", "reply_error"]

_HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


class Refused(Exception):
    """The request cannot be served (malformed, unsupported); the client is told."""


@dataclass
class Target:
    """Where the sandbox wants to go, and how it asked."""

    host: str
    port: int
    protocol: str
    head: bytes = b""  # bytes to send upstream first (plain HTTP: the rewritten request)


def denial(target: Target, reason: str) -> str:
    """The message of a refusal, as the sandbox sees it."""
    text = f"egress to {target.host}:{target.port} denied: {reason}"
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


async def read_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Target:
    """Read the request's head from the sandbox and say where it goes.

    Raises:
        Refused: malformed or unsupported request.
    """
    first = await reader.readexactly(1)
    if first == b"\x05":
        return await _socks_target(reader, writer)
    try:
        head = first + await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise Refused("request head too large") from None
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3:
        raise Refused("malformed request line")
    method, uri, version = parts
    if method == "CONNECT":
        host, _, port = uri.rpartition(":")
        if not host or not port.isdigit():
            raise Refused("CONNECT needs host:port")
        return Target(host.strip("[]"), int(port), "connect")
    url = urlsplit(uri)
    if url.scheme != "http" or not url.hostname:
        raise Refused("only absolute http:// URLs are proxied (use CONNECT for https)")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [h for h in rest.split(b"\r\n") if h and h.split(b":")[0].lower() not in _HOP_HEADERS]
    new = [f"{method} {path} {version}".encode(), *kept, b"Connection: close", b"", b""]
    return Target(url.hostname, url.port or 80, "http", b"\r\n".join(new))


async def _socks_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Target:
    nmethods = (await reader.readexactly(1))[0]
    if 0 not in await reader.readexactly(nmethods):
        writer.write(b"\x05\xff")
        raise Refused("SOCKS5: only 'no authentication' is supported")
    writer.write(b"\x05\x00")
    await writer.drain()
    ver, cmd, _, atyp = await reader.readexactly(4)
    if ver != 5 or cmd != 1:
        raise Refused("SOCKS5: only CONNECT is supported")
    if atyp == 1:
        host = ".".join(str(b) for b in await reader.readexactly(4))
    elif atyp == 3:
        host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("idna")
    elif atyp == 4:
        raw = await reader.readexactly(16)
        host = ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))
    else:
        raise Refused("SOCKS5: unknown address type")
    port = int.from_bytes(await reader.readexactly(2), "big")
    return Target(host, port, "socks5")


async def accept(writer: asyncio.StreamWriter, target: Target) -> None:
    """Tell the sandbox its connection is established."""
    if target.protocol == "connect":
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    elif target.protocol == "socks5":
        writer.write(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
    await writer.drain()


async def refuse(
    writer: asyncio.StreamWriter, target: Target, reason: str, *, code: int = 403
) -> None:
    """Tell the sandbox its request is refused (403) or failed (502), in its protocol."""
    message = denial(target, reason)
    with contextlib.suppress(OSError):
        if target.protocol == "socks5":
            writer.write(b"\x05" + (b"\x02" if code == 403 else b"\x05") + b"\x00\x01" + bytes(6))
        else:
            body = (message + "\n").encode()
            writer.write(
                f"HTTP/1.1 {code} {message}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        await writer.drain()


async def reply_error(writer: asyncio.StreamWriter, code: int, message: str) -> None:
    """Answer an HTTP error before any request was read (the protocol is unknown) and
    close: an HTTP client prints the message, a SOCKS client sees a failed greeting."""
    with contextlib.suppress(OSError):
        writer.write(f"HTTP/1.1 {code} {message}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
    writer.close()
