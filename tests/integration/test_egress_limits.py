"""The host egress proxy's guards on loopback: real sockets, real Redis, real host addresses.

23.3: the host's own addresses and the grid's service ports (here the real
Redis) stay closed under ``*`` and under port-less ranges. 23.8: the handshake
deadline, the idle timeout and the cap of connections open at once hold, with
short limits set by the test, on both relay paths. A test plays the agent's
part and connects to the sandbox's Unix socket itself.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sandgrid.models import NetworkAttempt, NetworkPolicy
from sandgrid.wire import names
from sandgrid.wire.settings import Settings
from scheduler.network import network_view
from tests.integration import test_egress_proxy
from worker.egress import EgressProxy, RedisBook, Resolver
from worker.egress.fastpath import FastPath
from worker.egress.handler import Handler
from worker.egress.hostguard import HostGuard, interface_addresses
from worker.egress.limits import Limits

pytestmark = pytest.mark.integration

REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
SID = "s-egresslimitstest0001"
SILENT = "127.0.0.8"  # a server that accepts and never says a word
rds = test_egress_proxy.rds  # the same Redis fixture


def _keys() -> tuple[str, ...]:
    return (names.session_key(SID), names.egress_audit_key(SID), names.egress_usage_key(SID))


@pytest.fixture
def clean(rds: redis.Redis[str]) -> Iterator[None]:
    rds.delete(*_keys())
    yield
    rds.delete(*_keys())


def start(tmp_path: Path, limits: Limits, fast: FastPath | None = None) -> tuple[EgressProxy, Path]:
    """A proxy guarded as a node with this Redis is (the grid's ports from its settings)."""
    guard = HostGuard.from_settings(Settings(redis_url=REDIS_URL))
    handler = Handler(
        RedisBook(REDIS_URL), Resolver(), "pytest-node", 5.0, fast, guard=guard, limits=limits
    )
    egress = EgressProxy(handler, tmp_path / "egress")
    return egress, egress.open("sbx-1", lambda: SID)


def set_policy(rds: redis.Redis[str], policy: NetworkPolicy) -> None:
    rds.hset(names.session_key(SID), "network", json.dumps(policy.model_dump(mode="json")))


def connect(path: Path, data: bytes = b"") -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(str(path))
    if data:
        s.sendall(data)
    return s


def read_all(s: socket.socket) -> bytes:
    chunks = []
    while chunk := s.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def audit(rds: redis.Redis[str], n: int) -> list[NetworkAttempt]:
    deadline = time.monotonic() + 10
    while rds.xlen(names.egress_audit_key(SID)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = rds.xrange(names.egress_audit_key(SID))
    return [NetworkAttempt.model_validate_json(f["a"]) for _, f in rows]


class Listener:
    """A TCP listener of the test's own: accepts, optionally greets, then holds."""

    def __init__(self, host: str, greeting: bytes = b"") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.greeting = greeting
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)
            if self.greeting:
                conn.sendall(self.greeting)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def own_address() -> str | None:
    """A non-loopback IPv4 address of this host, off Docker's bridges (172.16/12)."""
    docker = ipaddress.ip_network("172.16.0.0/12")
    for addr in sorted(interface_addresses(), key=str):
        if addr.version == 4 and not addr.is_loopback and addr not in docker:
            return str(addr)
    return None


# 23.3: the host's own addresses and the grid's ports.


def test_allow_all_cannot_reach_a_listener_on_the_hosts_own_address(tmp_path, rds, clean) -> None:  # type: ignore[no-untyped-def]
    addr = own_address()
    if addr is None:
        pytest.skip("this host has only loopback (and Docker bridge) addresses")
    listener = Listener(addr, b"you reached the host\n")
    egress, path = start(tmp_path, Limits())
    try:
        set_policy(rds, NetworkPolicy(allow=["*", f"{addr.rsplit('.', 1)[0]}.0/24"]))
        with connect(path, f"CONNECT {addr}:{listener.port} HTTP/1.1\r\n\r\n".encode()) as s:
            out = read_all(s)
        assert out.startswith(f"HTTP/1.1 403 egress to {addr}:{listener.port} denied: ".encode())
        assert b"denied: host address" in out and listener.accepted == []
        [a] = audit(rds, 1)
        assert (a.allowed, a.rule, a.address) == (False, "host address", addr)
    finally:
        egress.stop()
        listener.close()


def test_the_grids_redis_needs_its_port_named_with_loopback_allowed(tmp_path, rds, clean) -> None:  # type: ignore[no-untyped-def]
    port = Settings(redis_url=REDIS_URL).redis_url.rsplit(":", 1)[1].split("/")[0]
    egress, path = start(tmp_path, Limits())
    try:
        set_policy(rds, NetworkPolicy(allow=["127.0.0.0/8"]))
        for host in ("127.0.0.1", "127.0.0.2"):
            with connect(path, f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode()) as s:
                assert b"denied: grid service port" in read_all(s).split(b"\r\n")[0]
        set_policy(rds, NetworkPolicy(allow=["127.0.0.0/8", f"127.0.0.1:{port}"]))
        with connect(path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nPING\r\n".encode()) as s:
            s.shutdown(socket.SHUT_WR)
            out = read_all(s)
        head, _, reply = out.partition(b"\r\n\r\n")
        assert head == b"HTTP/1.1 200 Connection established"
        assert reply in (b"+PONG\r\n", b"-NOAUTH Authentication required.\r\n")  # Redis answered
        assert [a.rule for a in audit(rds, 3)] == [
            "grid service port",
            "grid service port",
            "127.0.0.0/8",  # the allow entry that matched; the port entry opened it
        ]
    finally:
        egress.stop()


# 23.8: the handshake deadline, the idle timeout, the open cap.


def test_a_connection_sending_nothing_is_closed_at_the_handshake_deadline(tmp_path, clean) -> None:  # type: ignore[no-untyped-def]
    egress, path = start(tmp_path, Limits(handshake_timeout_s=0.5))
    try:
        for partial in (b"", b"CONNECT 203.0.113.9:4", b"\x05\x01"):  # nothing, or half of it
            began = time.monotonic()
            with connect(path, partial) as s:
                out = read_all(s)
            took = time.monotonic() - began
            assert out.startswith(b"HTTP/1.1 408 egress: no request within handshake_timeout_s=0.5")
            assert 0.4 < took < 5, took
    finally:
        egress.stop()


@pytest.mark.parametrize("fast", [FastPath(), FastPath(0)], ids=["splice", "asyncio"])
def test_an_idle_tunnel_is_closed_after_the_idle_timeout(tmp_path, rds, clean, fast) -> None:  # type: ignore[no-untyped-def]
    server = Listener(SILENT)
    egress, path = start(tmp_path, Limits(idle_timeout_s=1.0), fast)
    try:
        set_policy(rds, NetworkPolicy(allow=[SILENT]))
        began = time.monotonic()
        with connect(path, f"CONNECT {SILENT}:{server.port} HTTP/1.1\r\n\r\n".encode()) as s:
            assert s.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            time.sleep(0.6)
            s.sendall(b"x")  # a byte moved: the clock starts again
            assert read_all(s) == b""  # then nothing either way: the proxy closes it
        took = time.monotonic() - began
        assert 1.5 < took < 8, took
        [a] = audit(rds, 1)
        assert a.allowed and a.reason == "closed: idle for idle_timeout_s=1" and a.sent == 1
        assert fast.active == 0
    finally:
        egress.stop()
        server.close()


def test_connections_open_at_once_are_capped_from_accept(tmp_path, rds, clean) -> None:  # type: ignore[no-untyped-def]
    server = Listener(SILENT)
    egress, path = start(tmp_path, Limits(handshake_timeout_s=30, max_open=3))
    try:
        set_policy(rds, NetworkPolicy(allow=[SILENT]))
        idle = [connect(path) for _ in range(2)]  # accepted, nothing sent
        tunnel = connect(path, f"CONNECT {SILENT}:{server.port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.recv(100).startswith(b"HTTP/1.1 200")
        with connect(path) as extra:
            out = read_all(extra)
        assert out.startswith(b"HTTP/1.1 503 egress denied: too many connections open at once")
        assert b"(max_open=3)" in out
        idle.pop().close()
        time.sleep(0.3)  # the proxy sees the close
        with connect(path, f"CONNECT {SILENT}:{server.port} HTTP/1.1\r\n\r\n".encode()) as s:
            assert s.recv(100).startswith(b"HTTP/1.1 200")  # a slot is free again
        seen = audit(rds, 1)
        assert [(a.allowed, a.rule) for a in seen if not a.allowed] == [(False, "max_open")]
        view = network_view(rds, SID, None)
        assert view.limits is not None and view.limits.max_open == 3
        assert view.limits.handshake_timeout_s == 30
        for s in (*idle, tunnel):
            s.close()
    finally:
        egress.stop()
        server.close()
