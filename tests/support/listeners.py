"""Which local addresses a TCP port listens on, read from ``/proc/net/tcp{,6}``.

Tests of the grid's listeners (issue 23.3) check the socket itself, not only a
setting: a listener on ``0.0.0.0`` answers on loopback too, so a connection
test cannot tell the two apart.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

__all__ = ["listen_addresses"]

_LISTEN = "0A"


def _addr(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc prints IPv6 as four host-order 32-bit words
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def listen_addresses(port: int, proc: Path = Path("/proc/net")) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (any process)."""
    found = set()
    for name in ("tcp", "tcp6"):
        table = proc / name
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            host, hex_port = local.split(":")
            if state == _LISTEN and int(hex_port, 16) == port:
                found.add(_addr(host))
    return found
