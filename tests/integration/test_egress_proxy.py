"""The host egress proxy on loopback: real sockets, a real HTTP server, real Redis.

No container: a test plays the agent's part and connects to the sandbox's Unix
socket itself, with each of the three protocols. Names are mapped to 127.0.0.x
by the resolver override, as in the grid tests.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from sandgrid.models import NetworkAttempt, NetworkPolicy
from sandgrid.wire import names
from tests.support.egress_servers import free_port, http_server
from worker.egress import EgressBook, EgressProxy, RedisBook, Resolver
from worker.egress.book import Usage
from worker.egress.fastpath import FastPath
from worker.egress.handler import Handler

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
HOST = "127.0.0.7"
SID = "s-egressproxytest00001"
PAYLOAD = os.urandom(3 << 20)
#: A made-up name, mapped by the override so that even a broken proxy sends no DNS
#: query: a record with this address means the proxy resolved it.
TRAP = {"leak-check.invalid": "127.0.0.1"}


@pytest.fixture(scope="module")
def rds() -> Iterator[redis.Redis[str]]:
    client: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis unreachable: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    root = tmp_path_factory.mktemp("www")
    (root / "blob").write_bytes(PAYLOAD)
    port = free_port(HOST)
    with http_server(HOST, port, root, root.parent / "www.log"):
        yield port


@pytest.fixture
def proxy(tmp_path: Path, rds: redis.Redis[str]) -> Iterator[tuple[EgressProxy, Path]]:
    for key in (names.session_key(SID), names.egress_audit_key(SID), names.egress_usage_key(SID)):
        rds.delete(key)
    hosts = {"files.test": HOST, "redis.test": "127.0.0.1", **TRAP}
    handler = Handler(RedisBook(REDIS_URL), Resolver(hosts), "pytest-node", 5.0)
    egress = EgressProxy(handler, tmp_path / "egress")
    path = egress.open("sbx-1", lambda: SID)
    yield egress, path
    egress.stop()
    for key in (names.session_key(SID), names.egress_audit_key(SID), names.egress_usage_key(SID)):
        rds.delete(key)


def set_policy(rds: redis.Redis[str], policy: NetworkPolicy | None) -> None:
    value = policy.model_dump(mode="json") if policy else None
    rds.hset(names.session_key(SID), "network", json.dumps(value))


def exchange(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(str(path))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def audit(rds: redis.Redis[str]) -> list[NetworkAttempt]:
    deadline = time.monotonic() + 5
    while True:  # the record is written just after the connection closes
        rows = rds.xrange(names.egress_audit_key(SID))
        if rows or time.monotonic() > deadline:
            return [NetworkAttempt.model_validate_json(f["a"]) for _, f in rows]
        time.sleep(0.05)


ALLOW_FILES = NetworkPolicy(allow=["files.test", HOST])


def test_plain_http_through_the_proxy(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, ALLOW_FILES)
    out = exchange(
        proxy[1], f"GET http://files.test:{server}/blob HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    assert out.startswith(b"HTTP/1.0 200") and out.endswith(PAYLOAD)
    [a] = audit(rds)
    assert a.allowed and a.host == "files.test" and a.address == HOST and a.rule == "files.test"
    assert a.protocol == "http" and a.received == len(out) and a.sent > 0


def test_connect_tunnel(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, ALLOW_FILES)
    req = f"CONNECT files.test:{server} HTTP/1.1\r\n\r\nGET /blob HTTP/1.0\r\n\r\n".encode()
    out = exchange(proxy[1], req)
    assert out.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200")
    assert out.endswith(PAYLOAD)


def test_socks5(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, ALLOW_FILES)
    name = b"files.test"
    hello = b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name
    out = exchange(proxy[1], hello + server.to_bytes(2, "big") + b"GET /blob HTTP/1.0\r\n\r\n")
    assert out[:12] == b"\x05\x00" + b"\x05\x00\x00\x01" + bytes(6)
    assert out.endswith(PAYLOAD)
    assert audit(rds)[0].protocol == "socks5"


def test_no_policy_is_refused_with_the_reason(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    out = exchange(proxy[1], f"CONNECT files.test:{server} HTTP/1.1\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.1 403 egress to files.test:")
    assert b"denied: no network policy (offline session)" in out
    [a] = audit(rds)
    assert not a.allowed and a.sent == a.received == 0


@pytest.mark.parametrize("policy", [None, NetworkPolicy(allow=["pypi.org", "10.0.0.0/8"])])
def test_a_name_no_entry_could_allow_is_refused_without_a_lookup(proxy, rds, policy) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, policy)
    name = b"leak-check.invalid"
    socks = b"\x05\x01\x00\x05\x01\x00\x03" + bytes([len(name)]) + name + b"\x01\xbb"
    for req in (
        b"CONNECT localhost:6379 HTTP/1.1\r\n\r\n",
        b"CONNECT leak-check.invalid:443 HTTP/1.1\r\n\r\n",
        b"GET http://leak-check.invalid/ HTTP/1.1\r\n\r\n",
        socks,
    ):
        out = exchange(proxy[1], req)
        assert out.startswith((b"HTTP/1.1 403 egress to ", b"\x05\x00\x05\x02")), out
    seen = settle_audit(rds, 4)
    want = "no network policy (offline session)" if policy is None else "not in the allow list"
    assert [(a.allowed, a.reason, a.resolved, a.address) for a in seen] == [
        (False, want, False, "")
    ] * 4


def settle_audit(rds: redis.Redis[str], n: int) -> list[NetworkAttempt]:
    assert settle(lambda: rds.xlen(names.egress_audit_key(SID)) >= n)
    return audit(rds)


def test_a_deny_holds_for_the_ipv4_mapped_form_over_connect_and_socks5(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, NetworkPolicy(allow=["*", HOST], deny=[f"{HOST}:{server}"]))
    mapped = ipaddress.IPv6Address(f"::ffff:{HOST}")
    out = exchange(proxy[1], f"CONNECT [{mapped}]:{server} HTTP/1.1\r\n\r\n".encode())
    assert out.startswith(f"HTTP/1.1 403 egress to {mapped}:{server} denied: denied by".encode())
    socks = b"\x05\x01\x00\x05\x01\x00\x04" + mapped.packed + server.to_bytes(2, "big")
    assert exchange(proxy[1], socks) == b"\x05\x00\x05\x02\x00\x01" + bytes(6)
    seen = settle_audit(rds, 2)
    assert [(a.allowed, a.rule, a.protocol) for a in seen] == [
        (False, f"{HOST}:{server}", "connect"),
        (False, f"{HOST}:{server}", "socks5"),
    ]
    set_policy(rds, NetworkPolicy(allow=["*", HOST]))  # without the deny, the same form passes
    req = f"CONNECT [{mapped}]:{server} HTTP/1.1\r\n\r\nGET /blob HTTP/1.0\r\n\r\n"
    assert exchange(proxy[1], req.encode()).endswith(PAYLOAD)


def test_redis_port_refused_even_under_allow_all(proxy, rds) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, NetworkPolicy(allow=["*"]))
    for target in ("127.0.0.1:6379", "redis.test:6379", "[::1]:6379"):
        out = exchange(proxy[1], f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        assert b"denied: loopback address" in out.split(b"\r\n")[0], out
    assert rds.ping()
    assert [a.rule for a in audit(rds)] == ["loopback address"] * 3


def test_private_ip_literal_is_refused_naming_the_rule(proxy, rds) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, NetworkPolicy(allow=["*"]))
    out = exchange(proxy[1], b"CONNECT 10.0.0.5:6379 HTTP/1.1\r\n\r\n")
    assert out.split(b"\r\n")[0] == b"HTTP/1.1 403 egress to 10.0.0.5:6379 denied: private address"
    out = exchange(proxy[1], b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
    assert b"denied: metadata address" in out


def test_deny_wins_and_live_change_holds_for_the_next_connection(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    req = f"GET http://files.test:{server}/blob HTTP/1.1\r\n\r\n".encode()
    set_policy(rds, ALLOW_FILES)
    assert exchange(proxy[1], req).startswith(b"HTTP/1.0 200")
    set_policy(rds, NetworkPolicy(allow=["files.test", HOST], deny=[f"files.test:{server}"]))
    out = exchange(proxy[1], req)
    assert f"denied: denied by rule 'files.test:{server}'".encode() in out
    set_policy(rds, NetworkPolicy(allow=["pypi.org"]))
    assert b"denied: not in the allow list" in exchange(proxy[1], req)
    assert [a.allowed for a in audit(rds)] == [True, False, False]


def test_connection_quota(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, NetworkPolicy(allow=["files.test", HOST], max_connections=2))
    req = f"GET http://files.test:{server}/blob HTTP/1.1\r\n\r\n".encode()
    for _ in range(2):
        assert exchange(proxy[1], req).startswith(b"HTTP/1.0 200")
    out = exchange(proxy[1], req)
    assert b"denied: connection quota exceeded (max_connections=2)" in out
    assert rds.hget(names.egress_usage_key(SID), "connections") == "2"


def test_byte_quota_cuts_the_connection(proxy, rds, server) -> None:  # type: ignore[no-untyped-def]
    set_policy(rds, NetworkPolicy(allow=["files.test", HOST], max_bytes=1 << 20))
    req = f"GET http://files.test:{server}/blob HTTP/1.1\r\n\r\n".encode()
    out = exchange(proxy[1], req)
    assert out.startswith(b"HTTP/1.0 200") and len(out) <= 1 << 20
    [a] = audit(rds)
    assert a.reason == f"closed: byte quota exceeded (max_bytes={1 << 20})"
    assert b"denied: byte quota exceeded" in exchange(proxy[1], req)


def test_unbound_sandbox_refuses_and_closed_socket_is_gone(tmp_path: Path) -> None:
    handler = Handler(RedisBook(REDIS_URL), Resolver(), "pytest-node")
    egress = EgressProxy(handler, tmp_path / "egress")
    path = egress.open("warm-1", lambda: None)
    try:
        assert b"no network policy" in exchange(path, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
        egress.close("warm-1")
        assert not path.parent.exists()
    finally:
        egress.stop()


# The fast path (worker.egress.fastpath: splice threads) against the asyncio copy.


def fast_proxy(tmp_path: Path, fast: FastPath, book: EgressBook | None = None) -> EgressProxy:
    handler = Handler(book or RedisBook(REDIS_URL), Resolver({"files.test": HOST}), "n", 5.0, fast)
    return EgressProxy(handler, tmp_path / "egress")


@pytest.mark.parametrize("fast", [FastPath(), FastPath(0)], ids=["splice", "asyncio"])
def test_both_paths_count_exactly_the_bytes_moved(tmp_path, rds, server, fast) -> None:  # type: ignore[no-untyped-def]
    for key in (names.egress_audit_key(SID), names.egress_usage_key(SID)):
        rds.delete(key)
    set_policy(rds, ALLOW_FILES)
    egress = fast_proxy(tmp_path, fast)
    try:
        path = egress.open("sbx-2", lambda: SID)
        get = b"GET /blob HTTP/1.0\r\n\r\n"
        out = exchange(path, f"CONNECT files.test:{server} HTTP/1.1\r\n\r\n".encode() + get)
        reply = b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert out.startswith(reply) and out.endswith(PAYLOAD)
        [a] = audit(rds)
        assert (a.sent, a.received) == (len(get), len(out) - len(reply))
        want = {"connections": "1", "bytes": str(a.sent + a.received)}
        key = names.egress_usage_key(SID)
        usage = lambda: {k: v for k, v in rds.hgetall(key).items() if k != "limits"}  # noqa: E731
        assert settle(lambda: usage() == want)  # added just after the record
        assert fast.active == 0
    finally:  # only now: stopping ends what is still in flight
        egress.stop()


class _Book(EgressBook):
    """Allows files.test, keeps attempts in memory (no Redis connections to count)."""

    def __init__(self) -> None:
        self.attempts: list[NetworkAttempt] = []

    async def policy(self, session_id: str) -> NetworkPolicy | None:
        return ALLOW_FILES

    async def usage(self, session_id: str) -> Usage:
        return Usage()

    async def record(self, session_id: str, attempt: NetworkAttempt) -> None:
        self.attempts.append(attempt)

    async def add_usage(self, session_id: str, connections: int, nbytes: int) -> None:
        return None


def settle(cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + 10
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def nfds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_closing_a_sandbox_ends_its_connections_and_leaks_nothing(tmp_path, server) -> None:  # type: ignore[no-untyped-def]
    book = _Book()
    egress = fast_proxy(tmp_path, FastPath(), book)
    try:
        path = egress.open("sbx-3", lambda: SID)
        req = f"GET http://files.test:{server}/blob HTTP/1.1\r\n\r\n".encode()
        assert exchange(path, req).endswith(PAYLOAD)  # warm: the loop and its thread run
        assert settle(lambda: not any(t.name == "egress-link" for t in threading.enumerate()))
        threads, fds = threading.active_count(), nfds()
        for _ in range(30):
            assert exchange(path, req).endswith(PAYLOAD)
        assert settle(lambda: threading.active_count() == threads), threading.enumerate()
        assert settle(lambda: nfds() == fds)
        held = []
        for _ in range(3):  # tunnels left open, idle on both sides
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(20)
            s.connect(str(path))
            s.sendall(f"CONNECT files.test:{server} HTTP/1.1\r\n\r\n".encode())
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            held.append(s)
        assert settle(lambda: egress.handler.fast.active == 3)
        egress.close("sbx-3", SID)
        assert all(s.recv(100) == b"" for s in held)  # EOF: the proxy closed them
        for s in held:
            s.close()
        assert settle(lambda: threading.active_count() == threads), threading.enumerate()
        assert settle(lambda: nfds() == fds - 1)  # its listener is closed too
        assert egress.handler.fast.active == 0
        closed = [a.reason for a in book.attempts[-3:]]
        assert closed == ["closed: sandbox closed"] * 3
    finally:
        egress.stop()
