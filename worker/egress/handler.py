"""One egress connection: read what the sandbox asks for, decide, connect, pipe, audit.

The request is read by ``protocol`` (SOCKS5, CONNECT, plain HTTP) within
``Limits.handshake_timeout_s``. The name is resolved here (never in the
sandbox), and only after ``sandgrid.network.precheck`` found that the policy
could allow it (an offline session's names are never looked up); the decision
covers every address, the host's own addresses and the grid's ports
(``hostguard``), and the connection goes only to an address that was checked.
An established connection with no byte either way for ``idle_timeout_s`` is
closed; ``EgressProxy`` holds the cap of connections open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sandgrid.models import NetworkAttempt, NetworkPolicy
from sandgrid.netaddr import IPAddress
from sandgrid.network import Decision, decide, precheck
from worker.egress.book import EgressBook, Usage
from worker.egress.fastpath import FastPath, add_bytes
from worker.egress.hostguard import HostGuard
from worker.egress.limits import Limits
from worker.egress.protocol import (
    Refused,
    Target,
    accept,
    read_target,
    refuse,
    reply_error,
)
from worker.egress.resolver import Resolver

__all__ = ["STREAM_LIMIT", "Handler"]

log = logging.getLogger(__name__)

#: The buffer of each stream (a request head longer than this is refused).
STREAM_LIMIT = 1 << 20
_CHUNK = 256 << 10

_Count = Callable[[int, int], int]


class _QuotaExceeded(Exception):
    pass


class _Idle(Exception):
    pass


@dataclass
class _Attempt:
    target: Target
    started: float = field(default_factory=time.monotonic)
    ts: float = field(default_factory=time.time)
    address: str = ""
    resolved: bool = False  # the name was looked up
    counts: list[int] = field(default_factory=lambda: [0, 0])  # sent, received
    active: float = field(default_factory=time.monotonic)  # the last byte either way


class Handler:
    """Serves connections of any session: the policy is looked up per connection.

    Args:
        book: policies in, attempts and usage out.
        resolver: resolves names on the host.
        node: this node's name (recorded with each attempt).
        connect_timeout_s: how long a connection upstream may take.
        fast: moves allowed connections' bytes in splice threads (None: the
            default ``FastPath``; ``FastPath(0)``: always the asyncio copy).
        guard: the host's own addresses and the grid's ports (None: the
            ranges alone, for tests that need the host's addresses open).
        limits: the handshake deadline, the idle timeout, the open cap.
    """

    def __init__(
        self,
        book: EgressBook,
        resolver: Resolver,
        node: str,
        connect_timeout_s: float = 10.0,
        fast: FastPath | None = None,
        *,
        guard: HostGuard | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.book = book
        self.resolver = resolver
        self.node = node
        self.connect_timeout_s = connect_timeout_s
        self.fast = fast if fast is not None else FastPath()
        self.guard = guard if guard is not None else HostGuard(set(), read=frozenset)
        self.limits = limits or Limits()
        self._usage: dict[str, Usage] = {}
        self._shown: set[str] = set()  # sessions whose limits the book has

    async def serve(
        self, session_id: str | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve one connection from a sandbox of ``session_id`` (None: not yet bound)."""
        try:
            target = await asyncio.wait_for(
                read_target(reader, writer), self.limits.handshake_timeout_s
            )
        except TimeoutError:
            reason = f"no request within handshake_timeout_s={self.limits.handshake_timeout_s:g}"
            await reply_error(writer, 408, f"egress: {reason}")
            return
        except (Refused, asyncio.IncompleteReadError, UnicodeError, OSError) as exc:
            with contextlib.suppress(OSError):
                if isinstance(exc, Refused | UnicodeError):
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
            await refuse(writer, target, early.reason)
            await self._record(session_id, attempt, early, policy=None)
            return
        addrs = await self._resolve(target, attempt)
        usage = await self._usage_of(session_id) if session_id and policy else None
        decision = self._decide(policy, target, addrs, usage)
        if not decision.allowed:
            attempt.address = str(addrs[0]) if addrs else ""
            await refuse(writer, target, decision.reason)
            await self._record(session_id, attempt, decision, policy=None)
            return
        assert policy is not None and session_id is not None and usage is not None
        usage.connections += 1
        await self._add_usage(session_id, 1, 0)  # counted in the book before any byte moves
        await self._show_limits(session_id)
        upstream = await self._connect(addrs, target, attempt)
        if upstream is None:
            failed = Decision(True, decision.rule, "connection failed")
            await refuse(writer, target, "connection failed", code=502)
            await self._record(session_id, attempt, failed, policy)
            return
        await accept(writer, target)
        decision = await self._carry(
            session_id, (reader, writer), upstream, attempt, usage, policy, decision
        )
        await self._record(session_id, attempt, decision, policy)

    async def _carry(
        self,
        session_id: str,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        attempt: _Attempt,
        usage: Usage,
        policy: NetworkPolicy,
        decision: Decision,
    ) -> Decision:
        """Relay an accepted connection; the decision as it ended (quota, idle, done)."""
        try:
            await self._pipe(client, upstream, attempt, usage, policy.max_bytes)
        except _QuotaExceeded:
            quota = f"closed: byte quota exceeded (max_bytes={policy.max_bytes})"
            decision = Decision(True, decision.rule, quota)
        except _Idle:
            idle = f"closed: idle for idle_timeout_s={self.limits.idle_timeout_s:g}"
            decision = Decision(True, decision.rule, idle)
        except asyncio.CancelledError:  # the sandbox is gone: its connections too
            closed = Decision(True, decision.rule, "closed: sandbox closed")
            await self._record(session_id, attempt, closed, policy)
            raise
        finally:
            upstream[1].close()
        return decision

    async def _show_limits(self, session_id: str) -> None:
        """Tell the book the limits once per session (shown only: traffic goes on)."""
        if session_id not in self._shown:
            self._shown.add(session_id)
            with contextlib.suppress(Exception):
                await self.book.show_limits(session_id, self.limits.shown())

    async def _resolve(self, target: Target, attempt: _Attempt) -> list[IPAddress]:
        """The addresses of the target: the literal itself, or the name looked up."""
        literal = _literal(target.host)
        if literal is not None:
            return [literal]
        attempt.resolved = True
        try:
            return await asyncio.wait_for(
                self.resolver.resolve(target.host, target.port), self.connect_timeout_s
            )
        except (OSError, TimeoutError):
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
            policy.allow if policy else None,
            policy.deny if policy else [],
            *_hp(target),
            addrs,
            self.guard.current(),
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

    async def refuse_open(self, session_id: str | None, writer: asyncio.StreamWriter) -> None:
        """Refuse a connection beyond ``max_open`` at accept, before reading anything."""
        reason = f"too many connections open at once (max_open={self.limits.max_open})"
        await reply_error(writer, 503, f"egress denied: {reason}")
        attempt = _Attempt(Target("", 0, ""))
        await self._record(session_id, attempt, Decision(False, "max_open", reason), None)

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
        self._shown.discard(session_id)

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
            attempt.active = time.monotonic()
            return add_bytes(attempt.counts, idx, usage, n, max_bytes)

        relay = asyncio.ensure_future(self._relay(client, upstream, count))
        try:
            await self._watch(relay, attempt)
        finally:
            if not relay.done():  # cancelled from outside, or idle: the relay ends too
                relay.cancel()
                await asyncio.wait({relay})

    async def _watch(self, relay: asyncio.Future[None], attempt: _Attempt) -> None:
        """Wait for ``relay``; raise ``_Idle`` once no byte moved for ``idle_timeout_s``."""
        while True:
            left = attempt.active + self.limits.idle_timeout_s - time.monotonic()
            if left <= 0:
                raise _Idle
            done, _ = await asyncio.wait({relay}, timeout=left)
            if done:
                return relay.result()

    async def _relay(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        count: _Count,
    ) -> None:
        cut = await self.fast.pipe(client, upstream, count)
        if cut:
            raise _QuotaExceeded
        if cut is not None:
            return
        up = asyncio.create_task(_copy(client[0], upstream[1], 0, count))
        down = asyncio.create_task(_copy(upstream[0], client[1], 1, count))
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
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, idx: int, count: _Count
) -> None:
    while data := await src.read(_CHUNK):
        allowed = count(idx, len(data))
        dst.write(data[:allowed])
        await dst.drain()
        if allowed < len(data):
            raise _QuotaExceeded
    if dst.can_write_eof():
        with contextlib.suppress(OSError):
            dst.write_eof()
