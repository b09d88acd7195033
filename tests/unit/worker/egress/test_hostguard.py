"""The host's own addresses and the grid's ports, as the egress decision sees them (23.3)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from sandgrid.wire.settings import Settings
from worker.egress.hostguard import HostGuard, interface_addresses

FIB = """Main:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.0.2.0/24 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
           |-- 192.0.2.9
              /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
"""
INET6 = """00000000000000000000000000000001 01 80 10 80       lo
fd000000000000000000000000000002 04 40 00 82     eth0
"""


def test_addresses_are_read_from_the_kernels_tables(tmp_path: Path) -> None:
    (tmp_path / "fib_trie").write_text(FIB)
    (tmp_path / "if_inet6").write_text(INET6)
    got = {str(a) for a in interface_addresses(tmp_path)}
    assert got == {"127.0.0.1", "192.0.2.2", "192.0.2.9", "::1", "fd00::2"}  # aliases too


def test_this_hosts_addresses_hold_loopback() -> None:
    assert ipaddress.ip_address("127.0.0.1") in interface_addresses()


def test_ports_from_the_settings_and_refresh() -> None:
    settings = Settings(redis_url="redis://10.9.0.7:6390/0", api_port=8711)
    reads = [frozenset({ipaddress.ip_address("192.0.2.2")})]
    guard = HostGuard.from_settings(settings)
    assert {6390, 9000, 8711, 9810, 5555, 9001} <= guard.current().service_ports
    assert (ipaddress.ip_address("10.9.0.7"), 6390) in guard.current().endpoints
    fake = HostGuard({6379}, refresh_s=0, read=lambda: reads[-1])
    assert fake.current().host_addrs == reads[0]
    reads.append(frozenset({ipaddress.ip_address("192.0.2.3")}))
    assert fake.current().host_addrs == reads[1]  # read again: older than refresh_s
    fake.add_port(41234)
    assert 41234 in fake.current().service_ports


def test_the_image_registrys_port_is_a_grid_port_unless_there_is_none() -> None:
    """25.2: a template's build (or a session) allowed loopback must not push to the registry."""
    from sandgrid.wire.settings import ImageSettings

    ports = HostGuard.from_settings(Settings()).current().service_ports
    assert 5000 in ports  # the default registry, 127.0.0.1:5000
    moved = Settings(images=ImageSettings(registry="127.0.0.1:5111"))
    assert 5111 in HostGuard.from_settings(moved).current().service_ports
    none = Settings(images=ImageSettings(registry=""))
    assert 5000 not in HostGuard.from_settings(none).current().service_ports
