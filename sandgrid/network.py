"""Network egress policy: parsing entries and deciding one connection (pure, stdlib only).

An entry is ``HOST[:PORT]`` where HOST is

* a name: ``pypi.org`` (exactly that name);
* a wildcard: ``*.pythonhosted.org`` (any name under it, not the apex), or ``*``
  (any name and any *public* address);
* an address or a range: ``203.0.113.7``, ``203.0.113.0/24``, ``[2001:db8::1]:443``.

``precheck`` is what can be decided before a name is resolved: no policy, a
name denied by a name entry, or a name that no allow entry could match (only
``*``, an exact name and ``*.domain`` match a name) is refused without any DNS
lookup, so a name chosen by sandbox code never leaves the host as a query from
a session that may not reach it. ``decide`` applies a policy to one resolved
attempt (and runs ``precheck`` first): first ``deny`` (by name or by any
resolved address), then ``allow`` (the name must match a name rule, an IP
literal an address rule), then every resolved address: loopback, private,
link-local, metadata and other special addresses are refused unless an allow
entry is itself an address range inside that special range (``127.0.0.5``,
``10.1.0.0/16``). ``*`` and names never unlock them, so a name that resolves
(or rebinds) to ``10.0.0.5`` or to the grid's own Redis is refused. A
``Guard`` adds what only the deciding host knows: its own interface addresses
and the grid's service ports (see ``Guard`` for what opens them).

IPv6 forms that carry an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are
decided as the IPv4 address they carry (``unembed``), for allow, deny and the
special ranges alike; an entry written in one of those forms is refused
(``parse_rule``), so every rule about an IPv4 address is written as IPv4.

Both sides use it: the API to validate policies and tenant ceilings, the
worker's egress proxy to decide each connection.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from sandgrid.netaddr import (
    SPECIAL_RANGES,
    IPAddress,
    IPNetwork,
    embedding,
    special_kind,
    unembed,
)

__all__ = [
    "HOST_ADDRESS",
    "NO_GUARD",
    "OFFLINE",
    "SERVICE_PORT",
    "Decision",
    "Guard",
    "Rule",
    "covers",
    "decide",
    "parse_entries",
    "parse_rule",
    "precheck",
]

_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_NAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")


@dataclass(frozen=True)
class Rule:
    """One parsed entry: a name pattern or an address range, and an optional port."""

    text: str
    name: str | None = None
    net: IPNetwork | None = None
    port: int | None = None

    @property
    def is_any(self) -> bool:
        return self.name == "*"

    def _port_ok(self, port: int) -> bool:
        return self.port is None or self.port == port

    def matches_name(self, host: str, port: int) -> bool:
        """Whether this rule matches the name ``host`` (lower case) on ``port``."""
        if self.name is None or not self._port_ok(port):
            return False
        if self.name == "*" or self.name == host:
            return True
        return self.name.startswith("*.") and host.endswith(self.name[1:])

    def matches_addr(self, addr: IPAddress, port: int) -> bool:
        """Whether this rule matches the address ``addr`` on ``port`` (``*`` does)."""
        if not self._port_ok(port):
            return False
        if self.is_any:
            return True
        return self.net is not None and addr.version == self.net.version and addr in self.net

    def names_exactly(self, addr: IPAddress, port: int) -> bool:
        """Whether this rule is the one address ``addr`` (a /32 or /128) on ``port``."""
        return (
            self.net is not None and self.net.num_addresses == 1 and self.matches_addr(addr, port)
        )

    def names_port(self, addr: IPAddress, port: int) -> bool:
        """Whether this rule is an address range holding ``addr`` with ``port`` written."""
        return self.net is not None and self.port == port and self.matches_addr(addr, port)

    def names_special(self, addr: IPAddress, port: int) -> bool:
        """Whether this rule explicitly names the special address ``addr``: it is an
        address range inside the special range that holds ``addr``."""
        if self.net is None or not self.matches_addr(addr, port):
            return False
        for _, special in SPECIAL_RANGES:
            if addr in special and self.net.version == special.version:
                return self.net.subnet_of(special)  # type: ignore[arg-type]
        return False


@dataclass(frozen=True)
class Guard:
    """What is special on the deciding host beyond ``SPECIAL_RANGES`` (23.3).

    Attributes:
        host_addrs: every address of the host's interfaces: refused unless an
            allow entry is that very address (``192.0.2.2``, ``192.0.2.2:8080``).
        service_ports: the ports of the grid's own services (Redis, MinIO,
            the API, Flower, metrics): on a special address or a host address,
            refused unless an allow entry is an address range holding the
            address *with that port written* (``127.0.0.1:6379``); ``*``,
            names and port-less ranges (``127.0.0.0/8``) never open them.
        endpoints: the services' own ``(address, port)`` from the settings,
            refused the same way on any address (a Redis on a public address).
    """

    host_addrs: frozenset[IPAddress] = frozenset()
    service_ports: frozenset[int] = frozenset()
    endpoints: frozenset[tuple[IPAddress, int]] = frozenset()


#: No host knowledge (the API's checks, and tests of the ranges alone).
NO_GUARD = Guard()
#: The reasons (and rules) of the refusals ``Guard`` adds.
HOST_ADDRESS = "host address"
SERVICE_PORT = "grid service port"


@dataclass(frozen=True)
class Decision:
    """What ``decide`` said: allowed or not, by which rule, and why (for the audit)."""

    allowed: bool
    rule: str
    reason: str


def parse_rule(entry: str) -> Rule:
    """Parse one policy entry.

    Raises:
        ValueError: the entry is not ``HOST[:PORT]`` as described in the module
            docstring; the message says what is wrong with it.
    """
    text = entry.strip().lower()
    if not text or len(text) > 253 or any(c.isspace() for c in text):
        raise ValueError(f"entry {entry!r} must be a non-empty host[:port] without spaces")
    host, port = _split_port(entry, text)
    if host == "*":
        return Rule(text, name="*", port=port)
    try:
        net = ipaddress.ip_network(host, strict=True)
    except ValueError as exc:
        if any(c in host for c in "/:") or host.replace(".", "").isdigit():
            raise ValueError(f"entry {entry!r} is not a valid address or range: {exc}") from None
        if not _NAME.match(host):
            raise ValueError(
                f"entry {entry!r} must be a host name, *.domain, *, an address or a range"
            ) from None
        return Rule(text, name=host, port=port)
    kind = embedding(net)
    if kind is not None:
        raise ValueError(
            f"entry {entry!r} is in the {kind} form (IPv6 carrying IPv4): write the IPv4 "
            "address or range it carries (targets in that form are decided as IPv4)"
        )
    return Rule(text, net=net, port=port)


def parse_entries(field: str, entries: list[str]) -> list[str]:
    """Check every entry of a list (``field`` names it in the error); the entries
    normalised (stripped, lower case).

    Raises:
        ValueError: ``<field>[<index>]: <what is wrong with the entry>``.
    """
    for i, entry in enumerate(entries):
        try:
            parse_rule(entry)
        except ValueError as exc:
            raise ValueError(f"{field}[{i}]: {exc}") from None
    return [e.strip().lower() for e in entries]


def _split_port(entry: str, text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"entry {entry!r}: an IPv6 address in brackets must be [addr]:port")
        return host, _port(entry, rest[1:]) if rest else None
    if text.count(":") == 1:
        host, _, raw = text.partition(":")
        return host, _port(entry, raw)
    return text, None


def _port(entry: str, raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ValueError(f"entry {entry!r}: port must be a number from 1 to 65535")
    return int(raw)


#: The reason of every refusal of a session without a policy.
OFFLINE = "no network policy (offline session)"


def precheck(allow: list[str] | None, deny: list[str], host: str, port: int) -> Decision | None:
    """What can be decided about ``host:port`` before ``host`` is resolved.

    The egress proxy calls this before any lookup: a refusal here means the
    name is never resolved (no DNS query leaves the host for it).

    Args:
        allow: the policy's allow entries; None means the session has no network.
        deny: its deny entries.
        host: the name or IP literal the client asked for.
        port: the TCP port.

    Returns:
        The refusal, or None: resolve ``host`` (if a name), then ``decide``.
    """
    if allow is None:
        return Decision(False, "", OFFLINE)
    host = host.lower().rstrip(".")
    if _literal(host) is not None:
        return None  # an address: nothing to resolve, ``decide`` has it all
    for rule in map(parse_rule, deny):
        if rule.matches_name(host, port):
            return Decision(False, rule.text, f"denied by rule {rule.text!r}")
    if not any(parse_rule(e).matches_name(host, port) for e in allow):
        return Decision(False, "", "not in the allow list")
    return None


def decide(
    allow: list[str] | None,
    deny: list[str],
    host: str,
    port: int,
    addrs: list[IPAddress],
    guard: Guard = NO_GUARD,
) -> Decision:
    """Decide one attempt to reach ``host:port`` that resolved to ``addrs``.

    Args:
        allow: the policy's allow entries; None means the session has no network.
        deny: its deny entries (they win over allow).
        host: the name or IP literal the client asked for.
        port: the TCP port.
        addrs: every address ``host`` resolved to (the literal itself for an IP).
        guard: the host's own addresses and the grid's ports (``Guard``).
    """
    early = precheck(allow, deny, host, port)
    if early is not None or allow is None:
        return early or Decision(False, "", OFFLINE)
    host = host.lower().rstrip(".")
    allow_rules = [parse_rule(e) for e in allow]
    addrs = [unembed(a) for a in addrs]
    literal = _literal(host)
    literal = unembed(literal) if literal is not None else None
    targets = [*addrs, literal] if literal is not None else addrs
    for rule in map(parse_rule, deny):
        if any(rule.matches_addr(a, port) for a in targets):
            return Decision(False, rule.text, f"denied by rule {rule.text!r}")
    for rule in allow_rules:
        if rule.matches_addr(literal, port) if literal else rule.matches_name(host, port):
            break
    else:
        return Decision(False, "", "not in the allow list")
    for addr in addrs:
        kind = _refusal(addr, port, allow_rules, guard)
        if kind is not None:
            return Decision(False, kind, kind)
    return Decision(True, rule.text, f"allowed by rule {rule.text!r}")


def _refusal(addr: IPAddress, port: int, rules: list[Rule], guard: Guard) -> str | None:
    """Why the (allowed) address ``addr`` is still refused on ``port``, or None."""
    kind = special_kind(addr)
    if kind and not any(r.names_special(addr, port) for r in rules):
        return kind
    own = addr in guard.host_addrs and kind != "loopback address"
    if own and not any(r.names_exactly(addr, port) for r in rules):
        return HOST_ADDRESS
    grid = port in guard.service_ports and (kind is not None or own)
    if (grid or (addr, port) in guard.endpoints) and not any(
        r.names_port(addr, port) for r in rules
    ):
        return SERVICE_PORT
    return None


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def covers(ceiling: list[str], entry: str) -> bool:
    """Whether a tenant ``ceiling`` (allow entries) permits the allow ``entry``.

    ``*`` covers every name and every public range; a special range (private,
    loopback...) must be inside an address range of the ceiling.
    """
    want = parse_rule(entry)
    for c in map(parse_rule, ceiling):
        if c.port is not None and c.port != want.port:
            continue
        if want.name is not None and c.name is not None:
            if c.is_any or c.name == want.name:
                return True
            if c.name.startswith("*.") and want.name.endswith(c.name[1:]):
                return True
        if want.net is not None:
            if c.net is not None and c.net.version == want.net.version:
                if want.net.subnet_of(c.net):  # type: ignore[arg-type]
                    return True
            elif c.is_any and not _touches_special(want.net):
                return True
    return False


def _touches_special(net: IPNetwork) -> bool:
    return any(net.version == s.version and net.overlaps(s) for _, s in SPECIAL_RANGES)
