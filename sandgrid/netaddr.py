"""Kinds of addresses the egress policy treats apart (pure, stdlib only).

``SPECIAL_RANGES`` are refused unless an allow entry names a range inside
them (``sandgrid.network.decide``). ``EMBEDDING_RANGES`` are the IPv6 forms
that carry an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4): a
target in one of them is decided as the IPv4 address it carries
(``unembed``), and a policy entry written in one of them is refused
(``embedding`` says which), so that no rule about an IPv4 address can be
passed around by writing the address as IPv6.
"""

from __future__ import annotations

import ipaddress

__all__ = [
    "EMBEDDING_RANGES",
    "SPECIAL_RANGES",
    "IPAddress",
    "IPNetwork",
    "embedding",
    "special_kind",
    "unembed",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


#: Address ranges refused unless an allow entry names a range inside them, by kind.
SPECIAL_RANGES: tuple[tuple[str, IPNetwork], ...] = tuple(
    (kind, ipaddress.ip_network(net))
    for kind, net in (
        ("metadata address", "169.254.169.254/32"),
        ("metadata address", "fd00:ec2::254/128"),
        ("loopback address", "127.0.0.0/8"),
        ("loopback address", "::1/128"),
        ("private address", "10.0.0.0/8"),
        ("private address", "172.16.0.0/12"),
        ("private address", "192.168.0.0/16"),
        ("private address", "100.64.0.0/10"),
        ("private address", "fc00::/7"),
        ("link-local address", "169.254.0.0/16"),
        ("link-local address", "fe80::/10"),
        ("unspecified address", "0.0.0.0/8"),
        ("unspecified address", "::/128"),
        ("multicast address", "224.0.0.0/4"),
        ("multicast address", "ff00::/8"),
        ("reserved address", "240.0.0.0/4"),
    )
)


#: IPv6 ranges whose addresses carry an IPv4 address, by name (``unembed``).
EMBEDDING_RANGES: tuple[tuple[str, ipaddress.IPv6Network], ...] = tuple(
    (kind, ipaddress.IPv6Network(net))
    for kind, net in (
        ("IPv4-mapped", "::ffff:0:0/96"),
        ("IPv4-compatible", "::/96"),  # but :: and ::1 (::/127) are themselves
        ("NAT64", "64:ff9b::/96"),
        ("6to4", "2002::/16"),
    )
)
_NOT_COMPAT = ipaddress.IPv6Network("::/127")


def unembed(addr: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4),
    else ``addr`` itself: every decision is made on what it returns."""
    if isinstance(addr, ipaddress.IPv4Address):
        return addr
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:  # bits 16-48
        return addr.sixtofour
    nat64, compat = EMBEDDING_RANGES[2][1], EMBEDDING_RANGES[1][1]
    if addr in nat64 or (addr in compat and addr not in _NOT_COMPAT):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr


def embedding(net: IPNetwork) -> str | None:
    """The name of the embedding range ``net`` lies in (None: a plain range)."""
    if isinstance(net, ipaddress.IPv4Network) or net.subnet_of(_NOT_COMPAT):
        return None
    for kind, embedding in EMBEDDING_RANGES:
        if net.subnet_of(embedding):
            return kind
    return None


def special_kind(addr: IPAddress) -> str | None:
    """The kind of special address ``addr`` is (``"private address"``...), or None."""
    addr = unembed(addr)
    for kind, net in SPECIAL_RANGES:
        if addr.version == net.version and addr in net:
            return kind
    return None
