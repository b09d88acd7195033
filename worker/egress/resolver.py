"""Name resolution on the host, for the egress proxy.

The proxy resolves every name itself (the sandbox has no DNS) and decides on
the addresses it will connect to, so a name cannot rebind between the check
and the connection. ``hosts`` overrides names (``SANDGRID_WORKER__EGRESS__HOSTS``):
tests map ``pypi.test`` to a loopback server with it; production leaves it empty.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from sandgrid.netaddr import IPAddress

__all__ = ["Resolver"]


class Resolver:
    """Resolves names with the system resolver, after the override map.

    Args:
        hosts: name -> address; names are compared in lower case.
    """

    def __init__(self, hosts: dict[str, str] | None = None) -> None:
        self.hosts = {k.lower(): ipaddress.ip_address(v) for k, v in (hosts or {}).items()}

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        """Every address of ``host`` (the literal itself for an IP), in resolver order.

        Raises:
            OSError: the name does not resolve.
        """
        name = host.lower().rstrip(".").strip("[]")
        try:
            return [ipaddress.ip_address(name)]
        except ValueError:
            pass
        if name in self.hosts:
            return [self.hosts[name]]
        infos = await asyncio.get_running_loop().getaddrinfo(
            name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        seen: dict[str, IPAddress] = {}
        for *_, sockaddr in infos:
            seen.setdefault(str(sockaddr[0]), ipaddress.ip_address(sockaddr[0]))
        return list(seen.values())
