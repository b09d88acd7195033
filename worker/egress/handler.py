"""One egress connection: read what the sandbox asks for, decide, connect, pipe, audit.

Three ways in, told apart by the first byte on the socket:

* ``0x05``: SOCKS5 (``ALL_PROXY=socks5h://``), CONNECT only, no authentication;
  a refusal is reply code 2 ("connection not allowed by ruleset").
* ``CONNECT host:port HTTP/1.1``: a tunnel (HTTPS through ``HTTPS_PROXY``).
* ``GET http://host[:port]/path HTTP/1.1``: plain HTTP proxying; the request is
  sent on in origin form with ``Connection: close``, one request per connection.

An HTTP refusal is ``403`` whose reason phrase and body say
``egress to HOST:PORT denied: REASON``, so pip, git and curl print it.
The name is resolved here (never in the sandbox), and only after
``sandgrid.network.precheck`` found that the policy could allow it (an offline
session's names are never looked up); the decision covers every address, and
the connection goes only to an address that was checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sandgrid.models import NetworkAttempt, NetworkPolicy
from sandgrid.network import Decision, IPAddress, decide, precheck
from worker.egress.book import EgressBook, Usage
from worker.egress.fastpath import FastPath, add_bytes
from worker.egress.resolver import Resolver

__all__ = ["STREAM_LIMIT", "Handler", "Target", "denial", "read_target"]

log = logging.getLogger(__name__)

#: The buffer of each stream (a request head longer than this is refused).
STREAM_LIMIT = 1 << 20
_CHUNK = 256 << 10
_HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


class _Refused(Exception):
    """The request cannot be served (malformed, unsupported); the client is told."""


class _QuotaExceeded(Exception):
    pass


@dataclass
class Target:
    """Where the sandbox wants to go, and how it asked."""

    host: str
    port: int
    protocol: str
    head: bytes = b""  # bytes to send upstream first (plain HTTP: the rewritten request)


@dataclass
class _Attempt:
    target: Target
    started: float = field(default_factory=time.monotonic)
    ts: float = field(default_factory=time.time)
    address: str = ""
    resolved: bool = False  # the name was looked up
    counts: list[int] = field(default_factory=lambda: [0, 0])  # sent, received


def denial(target: Target, reason: str) -> str:
    """The message of a refusal, as the sandbox sees it."""
    text = f"egress to {target.host}:{target.port} denied: {reason}"
    return "".join(c if 32 <= ord(c) < 127 else "?" for c in text)


async def read_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Target:
    """Read the request's head from the sandbox and say where it goes.

    Raises:
        _Refused: malformed or unsupported request.
    """
    first = await reader.readexactly(1)
    if first == b"\x05":
        return await _socks_target(reader, writer)
    try:
        head = first + await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Refused("request head too large") from None
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3:
        raise _Refused("malformed request line")
    method, uri, version = parts
    if method == "CONNECT":
        host, _, port = uri.rpartition(":")
        if not host or not port.isdigit():
            raise _Refused("CONNECT needs host:port")
        return Target(host.strip("[]"), int(port), "connect")
    url = urlsplit(uri)
    if url.scheme != "http" or not url.hostname:
        raise _Refused("only absolute http:// URLs are proxied (use CONNECT for https)")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [h for h in rest.split(b"\r\n") if h and h.split(b":")[0].lower() not in _HOP_HEADERS]
    new = [f"{method} {path} {version}".encode(), *kept, b"Connection: close", b"", b""]
    return Target(url.hostname, url.port or 80, "http", b"\r\n".join(new))


async def _socks_target(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Target:
    nmethods = (await reader.readexactly(1))[0]
    if 0 not in await reader.readexactly(nmethods):
        writer.write(b"\x05\xff")
        raise _Refused("SOCKS5: only 'no authentication' is supported")
    writer.write(b"\x05\x00")
    await writer.drain()
    ver, cmd, _, atyp = await reader.readexactly(4)
    if ver != 5 or cmd != 1:
        raise _Refused("SOCKS5: only CONNECT is supported")
    if atyp == 1:
        host = ".".join(str(b) for b in await reader.readexactly(4))
    elif atyp == 3:
        host = (await reader.readexactly((await reader.readexactly(1))[0])).decode("idna")
    elif atyp == 4:
        raw = await reader.readexactly(16)
        host = ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))
    else:
        raise _Refused("SOCKS5: unknown address type")
    port = int.from_bytes(await reader.readexactly(2), "big")
    return Target(host, port, "socks5")


class Handler:
    """Serves connections of any session: the policy is looked up per connection.

    Args:
        book: policies in, attempts and usage out.
        resolver: resolves names on the host.
        node: this node's name (recorded with each attempt).
        connect_timeout_s: how long a connection upstream may take.
        fast: moves allowed connections' bytes in splice threads (None: the
            default ``FastPath``; ``FastPath(0)``: always the asyncio copy).
    """

    def __init__(
        self,
        book: EgressBook,
        resolver: Resolver,
        node: str,
        connect_timeout_s: float = 10.0,
        fast: FastPath | None = None,
    ) -> None:
        self.book = book
        self.resolver = resolver
        self.node = node
        self.connect_timeout_s = connect_timeout_s
        self.fast = fast if fast is not None else FastPath()
        self._usage: dict[str, Usage] = {}

    async def serve(
        self, session_id: str | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one connection from a sandbox of ``session_id`` (None: not yet bound)."""
        try:
            target = await read_target(reader, writer)
        except (_Refused, asyncio.IncompleteReadError, UnicodeError, OSError) as exc:
            with contextlib.suppress(OSError):
                if isinstance(exc, _Refused | UnicodeError):
                    writer.write(f"HTTP/1.1 400 {exc}\r\nConnection: close\r\n\r\n".encode())
                writer.close()
            return
        try:
            await self._serve(session_id, target, reader, writer)
        finally:
            writer.close()

    async def _serve(
        self,
        session_id: str | None,
        target: Target,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        attempt = _Attempt(target)
        policy = await self.book.policy(session_id) if session_id else None
        allow, deny = (policy.allow, policy.deny) if policy else (None, [])
        early = precheck(allow, deny, *_hp(target))
        if early is not None:  # refused before any lookup: the name never leaves the host
            await _refuse(writer, target, early.reason)
            await self._record(session_id, attempt, early, policy=None)
            return
        addrs = await self._resolve(target, attempt)
        usage = await self._usage_of(session_id) if session_id and policy else None
        decision = self._decide(policy, target, addrs, usage)
        if not decision.allowed:
            attempt.address = str(addrs[0]) if addrs else ""
            await _refuse(writer, target, decision.reason)
            await self._record(session_id, attempt, decision, policy=None)
            return
        assert policy is not None and session_id is not None and usage is not None
        usage.connections += 1
        await self._add_usage(session_id, 1, 0)  # counted in the book before any byte moves
        upstream = await self._connect(addrs, target, attempt)
        if upstream is None:
            failed = Decision(True, decision.rule, "connection failed")
            await _refuse(writer, target, "connection failed", code=502)
            await self._record(session_id, attempt, failed, policy)
            return
        await _accept(writer, target, upstream[1])
        try:
            await self._pipe((reader, writer), upstream, attempt, usage, policy.max_bytes)
        except _QuotaExceeded:
            quota = f"closed: byte quota exceeded (max_bytes={policy.max_bytes})"
            decision = Decision(True, decision.rule, quota)
        except asyncio.CancelledError:  # the sandbox is gone: its connections too
            closed = Decision(True, decision.rule, "closed: sandbox closed")
            await self._record(session_id, attempt, closed, policy)
            raise
        finally:
            upstream[1].close()
        await self._record(session_id, attempt, decision, policy)

    async def _resolve(self, target: Target, attempt: _Attempt) -> list[IPAddress]:
        """The addresses of the target: the literal itself, or the name looked up."""
        literal = _literal(target.host)
        if literal is not None:
            return [literal]
        attempt.resolved = True
        try:
            return await self.resolver.resolve(target.host, target.port)
        except OSError:
            return []

    def _decide(
        self,
        policy: NetworkPolicy | None,
        target: Target,
        addrs: list[IPAddress],
        usage: Usage | None,
    ) -> Decision:
        if policy is not None and not addrs:
            return Decision(False, "", "name does not resolve")
        decision = decide(
            policy.allow if policy else None, policy.deny if policy else [], *_hp(target), addrs
        )
        if not decision.allowed or usage is None or policy is None:
            return decision
        if usage.connections >= policy.max_connections:
            reason = f"connection quota exceeded (max_connections={policy.max_connections})"
            return Decision(False, "max_connections", reason)
        if usage.bytes >= policy.max_bytes:
            reason = f"byte quota exceeded (max_bytes={policy.max_bytes})"
            return Decision(False, "max_bytes", reason)
        return decision

    async def _usage_of(self, session_id: str) -> Usage:
        if session_id not in self._usage:
            self._usage[session_id] = await self.book.usage(session_id)
        return self._usage[session_id]

    async def aclose(self) -> None:
        """Release the book's connections."""
        await self.book.aclose()

    def forget(self, session_id: str) -> None:
        """Drop the cached usage of a session that left this node."""
        self._usage.pop(session_id, None)

    async def _connect(
        self, addrs: list[IPAddress], target: Target, attempt: _Attempt
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for addr in addrs:
            attempt.address = str(addr)
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(str(addr), target.port, limit=STREAM_LIMIT),
                    self.connect_timeout_s,
                )
            except (OSError, TimeoutError):
                continue
        return None

    async def _pipe(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        attempt: _Attempt,
        usage: Usage,
        max_bytes: int,
    ) -> None:
        if attempt.target.head:
            upstream[1].write(attempt.target.head)
            head = len(attempt.target.head)  # counted, never cut (as the quota always did)
            add_bytes(attempt.counts, 0, usage, head, sys.maxsize)

        def count(idx: int, n: int) -> int:
            return add_bytes(attempt.counts, idx, usage, n, max_bytes)

        cut = await self.fast.pipe(client, upstream, count)
        if cut:
            raise _QuotaExceeded
        if cut is not None:
            return
        up = asyncio.create_task(_copy(client[0], upstream[1], attempt.counts, 0, usage, max_bytes))
        down = asyncio.create_task(
            _copy(upstream[0], client[1], attempt.counts, 1, usage, max_bytes)
        )
        try:
            done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if up in done and up.exception() is None and down not in done:
                await down  # the sandbox half-closed: the answer still comes
            for task in done:
                task.result()
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)

    async def _record(
        self,
        session_id: str | None,
        attempt: _Attempt,
        decision: Decision,
        policy: NetworkPolicy | None,
    ) -> None:
        if session_id is None:
            return
        sent, received = attempt.counts
        record = NetworkAttempt(
            ts=attempt.ts,
            host=attempt.target.host,
            port=attempt.target.port,
            address=attempt.address,
            resolved=attempt.resolved,
            allowed=decision.allowed,
            rule=decision.rule,
            reason=decision.reason,
            protocol=attempt.target.protocol,
            sent=sent,
            received=received,
            duration_ms=round((time.monotonic() - attempt.started) * 1000, 3),
            node=self.node,
        )
        try:
            await self.book.record(session_id, record)
            if policy is not None:
                await self.book.add_usage(session_id, 0, sent + received)
        except Exception:  # the audit store down must not break the sandbox's traffic
            log.exception("egress audit of session %s failed", session_id)

    async def _add_usage(self, session_id: str, connections: int, nbytes: int) -> None:
        try:
            await self.book.add_usage(session_id, connections, nbytes)
        except Exception:  # the usage store down must not break the sandbox's traffic
            log.exception("egress usage of session %s failed", session_id)


def _hp(target: Target) -> tuple[str, int]:
    return target.host, target.port


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


async def _copy(
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    counts: list[int],
    idx: int,
    usage: Usage,
    max_bytes: int,
) -> None:
    while data := await src.read(_CHUNK):
        allowed = add_bytes(counts, idx, usage, len(data), max_bytes)
        dst.write(data[:allowed])
        await dst.drain()
        if allowed < len(data):
            raise _QuotaExceeded
    if dst.can_write_eof():
        with contextlib.suppress(OSError):
            dst.write_eof()


async def _accept(writer: asyncio.StreamWriter, target: Target, upstream: object) -> None:
    if target.protocol == "connect":
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    elif target.protocol == "socks5":
        writer.write(b"\x05\x00\x00\x01\x00\x00\x00\x00\x00\x00")
    await writer.drain()


async def _refuse(
    writer: asyncio.StreamWriter, target: Target, reason: str, *, code: int = 403
) -> None:
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
