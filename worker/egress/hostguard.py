"""What only the worker's host knows about itself, for the egress decision (23.3).

A sandbox under ``*`` must not reach the host it runs on, nor the grid's own
services, through the proxy that runs on that host. ``HostGuard`` gives
``sandgrid.network.decide`` a ``Guard``:

* every address of the host's interfaces, read from ``/proc/net/fib_trie``
  (the kernel's LOCAL /32 routes: every IPv4 address, aliases included) and
  ``/proc/net/if_inet6``, else from ``SIOCGIFADDR`` per interface; read at
  start and again when older than ``refresh_s`` (an address added later);
* the grid's service ports from the settings (Redis, MinIO, the API, this
  node's metrics, and ``SANDGRID_WORKER__EGRESS__SERVICE_PORTS``: Flower, the
  MinIO console), and the ``(address, port)`` of Redis and MinIO themselves
  (their names resolved once, here: the operator's names, not the sandbox's).
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from sandgrid.netaddr import IPAddress, unembed
from sandgrid.network import Guard
from sandgrid.wire import redis_connect
from sandgrid.wire.settings import Settings

__all__ = ["HostGuard", "interface_addresses"]

_PROC = Path("/proc/net")
_SIOCGIFADDR = 0x8915


def interface_addresses(proc: Path = _PROC) -> frozenset[IPAddress]:
    """Every address of this host's interfaces (loopback included)."""
    found: set[IPAddress] = set(_fib_local(proc / "fib_trie")) or _ioctl_v4()
    try:
        for line in (proc / "if_inet6").read_text().splitlines():
            raw = line.split()[0]
            found.add(ipaddress.IPv6Address(int(raw, 16)))
    except (OSError, ValueError, IndexError):
        pass
    return frozenset(found)


def _fib_local(path: Path) -> set[IPAddress]:
    """The addresses of the ``/32 host LOCAL`` entries of the kernel's FIB."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return set()
    found: set[IPAddress] = set()
    last = ""
    for line in lines:
        text = line.strip()
        if text.startswith(("|--", "+--")):
            last = text[3:].strip().split("/")[0]
        elif text == "/32 host LOCAL" and last:
            found.add(ipaddress.IPv4Address(last))
    return found


def _ioctl_v4() -> set[IPAddress]:
    """Each interface's (first) IPv4 address, where ``/proc`` is not to be had."""
    found: set[IPAddress] = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(
                    sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode())
                )
            except OSError:
                continue
            found.add(ipaddress.IPv4Address(raw[20:24]))
    return found


def _registry_port(registry: str) -> set[int]:
    """The port of the grid's image registry (``host:port``; none when there is no registry)."""
    if not registry:
        return set()
    port = urlsplit(f"//{registry}").port
    return {port or 443}


def _endpoint(host: str | None, port: int | None) -> set[tuple[IPAddress, int]]:
    if not host or not port:
        return set()
    try:
        return {(unembed(ipaddress.ip_address(host.strip("[]"))), port)}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {(unembed(ipaddress.ip_address(info[4][0])), port) for info in infos}


class HostGuard:
    """The host's addresses (refreshed) and the grid's ports, as a ``Guard``.

    Args:
        ports: the grid's service ports.
        endpoints: the services' own ``(address, port)``.
        refresh_s: the addresses are read again when older than this.
        read: reads the addresses (tests give their own).
    """

    def __init__(
        self,
        ports: set[int],
        endpoints: set[tuple[IPAddress, int]] | None = None,
        refresh_s: float = 30.0,
        read: Callable[[], frozenset[IPAddress]] = interface_addresses,
    ) -> None:
        self.ports = {p for p in ports if p}
        self.endpoints = endpoints or set()
        self.refresh_s = refresh_s
        self.read = read
        self._guard = Guard()
        self._read_at = -float("inf")
        self.refresh()

    @classmethod
    def from_settings(cls, settings: Settings) -> HostGuard:
        """The guard of a node with these settings."""
        redis = redis_connect.endpoints(settings.redis_url, servers=True)  # sentinels' too (22.5)
        minio = urlsplit(f"//{settings.minio.endpoint}")
        egress = settings.worker.egress
        ports = {
            *(port for _, port in redis),
            minio.port or (443 if settings.minio.secure else 80),
            settings.api_port,
            settings.worker.metrics_port,
            *egress.service_ports,
            *_registry_port(settings.images.registry),  # 25.2: builds must not push or pull
        }
        endpoints = _endpoint(minio.hostname, minio.port)
        for host, port in redis:
            endpoints |= _endpoint(host, port)
        return cls(ports, endpoints, egress.host_refresh_s)

    def add_port(self, port: int) -> None:
        """Count ``port`` as a grid service port too (a port known only once bound)."""
        if port:
            self.ports.add(port)
            self._guard = Guard(
                self._guard.host_addrs, frozenset(self.ports), self._guard.endpoints
            )

    def refresh(self) -> Guard:
        """Read the host's addresses again."""
        addrs = frozenset(unembed(a) for a in self.read())
        self._guard = Guard(addrs, frozenset(self.ports), frozenset(self.endpoints))
        self._read_at = time.monotonic()
        return self._guard

    def current(self) -> Guard:
        """The guard, its addresses read again if older than ``refresh_s``."""
        if time.monotonic() - self._read_at >= self.refresh_s:
            return self.refresh()
        return self._guard
