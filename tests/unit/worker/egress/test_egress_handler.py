"""The egress handler against fake sockets: protocols, refusals, quotas, the audit."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest

from sandgrid.models import NetworkAttempt, NetworkPolicy
from worker.egress.book import EgressBook, Usage
from worker.egress.env import proxy_env, session_env
from worker.egress.handler import Handler
from worker.egress.protocol import read_target
from worker.egress.resolver import Resolver


class MemoryBook(EgressBook):
    def __init__(self, policy: NetworkPolicy | None) -> None:
        self.policy_now = policy
        self.attempts: list[NetworkAttempt] = []
        self.used = Usage()

    async def policy(self, session_id: str) -> NetworkPolicy | None:
        return self.policy_now

    async def usage(self, session_id: str) -> Usage:
        return Usage(self.used.connections, self.used.bytes)

    async def record(self, session_id: str, attempt: NetworkAttempt) -> None:
        self.attempts.append(attempt)

    async def add_usage(self, session_id: str, connections: int, nbytes: int) -> None:
        self.used.connections += connections
        self.used.bytes += nbytes


class FakeWriter:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return False


def reader_of(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def serve(handler: Handler, data: bytes, session: str | None = "s-1") -> bytes:
    writer = FakeWriter()

    async def go() -> None:
        await handler.serve(session, reader_of(data), writer)  # type: ignore[arg-type]

    asyncio.run(go())
    assert writer.closed
    return bytes(writer.data)


def targets(data: bytes) -> Any:
    async def go() -> Any:
        return await read_target(reader_of(data), FakeWriter())  # type: ignore[arg-type]

    return asyncio.run(go())


def test_read_target_for_each_protocol() -> None:
    t = targets(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
    assert (t.host, t.port, t.protocol, t.head) == ("pypi.org", 443, "connect", b"")
    t = targets(
        b"GET http://pypi.test/simple/x/?a=1 HTTP/1.1\r\nProxy-Connection: keep-alive\r\n"
        b"Host: pypi.test\r\n\r\n"
    )
    assert (t.host, t.port, t.protocol) == ("pypi.test", 80, "http")
    assert t.head == b"GET /simple/x/?a=1 HTTP/1.1\r\nHost: pypi.test\r\nConnection: close\r\n\r\n"
    t = targets(b"\x05\x01\x00\x05\x01\x00\x03\x08pypi.org\x01\xbb")
    assert (t.host, t.port, t.protocol) == ("pypi.org", 443, "socks5")
    t = targets(b"\x05\x01\x00\x05\x01\x00\x01\x0a\x00\x00\x05\x18\xeb")
    assert (t.host, t.port) == ("10.0.0.5", 6379)


def test_malformed_requests_get_400_and_nothing_is_recorded() -> None:
    book = MemoryBook(NetworkPolicy(allow=["*"]))
    handler = Handler(book, Resolver(), "n1")
    assert serve(handler, b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert serve(handler, b"\x05\x01\x00\x05\x02\x00\x01" + bytes(6)).startswith(b"\x05\x00")
    assert book.attempts == []


def test_a_denial_names_the_rule_in_each_protocol() -> None:
    book = MemoryBook(NetworkPolicy(allow=["*"]))
    handler = Handler(book, Resolver(), "n1")
    out = serve(handler, b"CONNECT 10.0.0.5:6379 HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403 egress to 10.0.0.5:6379 denied: private address\r\n")
    assert out.endswith(b"\r\n\r\negress to 10.0.0.5:6379 denied: private address\n")
    out = serve(handler, b"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x18\xeb")
    assert out == b"\x05\x00" + b"\x05\x02\x00\x01" + bytes(6)
    [a, b] = book.attempts
    assert (a.allowed, a.rule, a.address, a.protocol, a.node) == (
        False,
        "private address",
        "10.0.0.5",
        "connect",
        "n1",
    )
    assert (b.rule, b.protocol) == ("loopback address", "socks5")


def test_unresolvable_and_unbound() -> None:
    book = MemoryBook(NetworkPolicy(allow=["*"]))
    handler = Handler(book, Resolver({"nx.test": "203.0.113.9"}), "n1")

    async def no_dns(host: str, port: int) -> list[Any]:
        raise OSError("no such name")

    handler.resolver.resolve = no_dns  # type: ignore[method-assign]
    assert b"denied: name does not resolve" in serve(
        handler, b"CONNECT nx.example:443 HTTP/1.1\r\n\r\n"
    )
    out = serve(handler, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n", session=None)
    assert b"denied: no network policy" in out and len(book.attempts) == 1


class NoLookups(Resolver):
    """A resolver that fails the test if the handler asks it anything."""

    async def resolve(self, host: str, port: int) -> list[Any]:
        pytest.fail(f"the handler resolved {host!r}")


@pytest.mark.parametrize(
    ("policy", "request_", "reason"),
    [
        (None, b"CONNECT localhost:6379 HTTP/1.1\r\n\r\n", "no network policy"),
        (None, b"CONNECT leak-check.invalid:443 HTTP/1.1\r\n\r\n", "no network policy"),
        (None, b"GET http://leak-check.invalid/x HTTP/1.1\r\n\r\n", "no network policy"),
        (
            NetworkPolicy(allow=["pypi.org", "*.pythonhosted.org", "10.0.0.0/8"]),
            b"CONNECT leak-check.invalid:443 HTTP/1.1\r\n\r\n",
            "not in the allow list",
        ),
        (
            NetworkPolicy(allow=["*"], deny=["*.invalid"]),
            b"\x05\x01\x00\x05\x01\x00\x03\x12leak-check.invalid\x01\xbb",
            "denied by rule",
        ),
    ],
    ids=["offline-localhost", "offline-connect", "offline-http", "no-allow-match", "deny-name"],
)
def test_a_refusal_by_name_makes_no_lookup_and_says_so(
    policy: NetworkPolicy | None, request_: bytes, reason: str
) -> None:
    book = MemoryBook(policy)
    out = serve(Handler(book, NoLookups(), "n1"), request_)
    assert reason.encode() in out or out.startswith(b"\x05\x00\x05\x02")
    [a] = book.attempts
    assert not a.allowed and reason in a.reason
    assert (a.resolved, a.address) == (False, "")


def test_a_name_the_policy_could_allow_is_resolved_and_says_so() -> None:
    book = MemoryBook(NetworkPolicy(allow=["pypi.test"]))
    out = serve(
        Handler(book, Resolver({"pypi.test": "10.1.2.3"}), "n1"),
        b"CONNECT pypi.test:80 HTTP/1.1\r\n\r\n",
    )
    assert b"denied: private address" in out
    [a] = book.attempts
    assert (a.resolved, a.address) == (True, "10.1.2.3")
    literal = MemoryBook(NetworkPolicy(allow=["*"]))
    serve(Handler(literal, NoLookups(), "n1"), b"CONNECT 10.0.0.5:80 HTTP/1.1\r\n\r\n")
    assert (literal.attempts[0].resolved, literal.attempts[0].address) == (False, "10.0.0.5")


def test_connection_quota_is_enforced_from_recorded_usage() -> None:
    book = MemoryBook(NetworkPolicy(allow=["*"], max_connections=3))
    book.used = Usage(connections=3, bytes=0)
    handler = Handler(book, Resolver(), "n1")
    out = serve(handler, b"CONNECT 203.0.113.9:443 HTTP/1.1\r\n\r\n")
    assert b"denied: connection quota exceeded (max_connections=3)" in out
    book2 = MemoryBook(NetworkPolicy(allow=["*"], max_bytes=10))
    book2.used = Usage(connections=0, bytes=10)
    out = serve(Handler(book2, Resolver(), "n1"), b"CONNECT 203.0.113.9:443 HTTP/1.1\r\n\r\n")
    assert b"denied: byte quota exceeded (max_bytes=10)" in out


def test_resolver_override_and_literals() -> None:
    r = Resolver({"PyPI.test": "127.0.0.5"})
    assert asyncio.run(r.resolve("pypi.test", 80)) == [ipaddress.ip_address("127.0.0.5")]
    assert asyncio.run(r.resolve("[::1]", 80)) == [ipaddress.ip_address("::1")]


@pytest.mark.parametrize("network", [None, NetworkPolicy()])
def test_sandbox_environment(network: NetworkPolicy | None) -> None:
    from datetime import UTC, datetime

    from sandgrid.models import Quotas, SessionInfo

    now = datetime.now(UTC)
    info = SessionInfo(
        id="s-1",
        tenant="t",
        type="python",
        quotas=Quotas(),
        created_at=now,
        last_used=now,
        network=network,
    )
    assert session_env(info) == ({} if network is None else {"PIP_NO_INDEX": "0"})
    env = proxy_env(3128)
    assert env["http_proxy"] == env["HTTPS_PROXY"] == "http://127.0.0.1:3128"
    assert env["ALL_PROXY"] == "socks5h://127.0.0.1:3128" and "127.0.0.1" in env["NO_PROXY"]
