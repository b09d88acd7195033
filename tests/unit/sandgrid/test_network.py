"""The egress policy: entry parsing, decisions, tenant ceilings, the wire model."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from sandgrid.models import NetworkPolicy, SessionCreate
from sandgrid.netaddr import special_kind, unembed
from sandgrid.network import (
    HOST_ADDRESS,
    SERVICE_PORT,
    Guard,
    covers,
    decide,
    parse_rule,
    precheck,
)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


PUBLIC = [ip("151.101.0.223")]


@pytest.mark.parametrize(
    ("entry", "name", "net", "port"),
    [
        ("pypi.org", "pypi.org", None, None),
        ("*.pythonhosted.org", "*.pythonhosted.org", None, None),
        ("GitHub.com:443", "github.com", None, 443),
        ("*", "*", None, None),
        ("*:443", "*", None, 443),
        ("203.0.113.0/24", None, "203.0.113.0/24", None),
        ("203.0.113.7:22", None, "203.0.113.7/32", 22),
        ("[2001:db8::1]:443", None, "2001:db8::1/128", 443),
        ("2001:db8::/32", None, "2001:db8::/32", None),
    ],
)
def test_entries_parse(entry: str, name: str | None, net: str | None, port: int | None) -> None:
    rule = parse_rule(entry)
    assert rule.name == name and rule.port == port
    assert (str(rule.net) if rule.net else None) == net


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("", "non-empty"),
        ("a b", "without spaces"),
        ("pypi.org:0", "port must be"),
        ("pypi.org:http", "port must be"),
        ("10.0.0.1/8", "not a valid address"),
        ("300.1.1.1", "not a valid address"),
        ("foo.*.org", "host name"),
        ("-bad.org", "host name"),
        ("[::1", "brackets"),
    ],
)
def test_bad_entries_say_why(entry: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_rule(entry)


def test_the_model_names_the_field_and_index() -> None:
    with pytest.raises(ValidationError, match=r"network\.deny\[1\]: entry 'x y'"):
        NetworkPolicy(deny=["ok.org", "x y"])
    assert NetworkPolicy(allow=[" PyPI.org "]).allow == ["pypi.org"]
    assert SessionCreate().network is None


def test_no_policy_refuses_everything() -> None:
    d = decide(None, [], "pypi.org", 443, PUBLIC)
    assert not d.allowed and d.reason == "no network policy (offline session)"


def test_names_wildcards_and_ports() -> None:
    allow = ["pypi.org", "*.pythonhosted.org", "github.com:443"]
    assert decide(allow, [], "pypi.org", 443, PUBLIC).rule == "pypi.org"
    assert decide(allow, [], "files.pythonhosted.org", 443, PUBLIC).allowed
    assert not decide(allow, [], "pythonhosted.org", 443, PUBLIC).allowed  # not the apex
    assert decide(allow, [], "github.com", 443, PUBLIC).allowed
    assert decide(allow, [], "github.com", 22, PUBLIC).reason == "not in the allow list"
    assert not decide(allow, [], "evilpypi.org", 443, PUBLIC).allowed


def test_deny_wins_by_name_or_by_address() -> None:
    allow = ["*"]
    d = decide(allow, ["*.example.com"], "a.example.com", 80, PUBLIC)
    assert not d.allowed and d.reason == "denied by rule '*.example.com'"
    d = decide(allow, ["151.101.0.0/16"], "pypi.org", 443, PUBLIC)
    assert not d.allowed and d.rule == "151.101.0.0/16"


@pytest.mark.parametrize(
    ("addr", "kind"),
    [
        ("127.0.0.1", "loopback address"),
        ("::1", "loopback address"),
        ("10.0.0.5", "private address"),
        ("172.20.1.1", "private address"),
        ("192.168.1.1", "private address"),
        ("100.64.0.1", "private address"),
        ("fd12::1", "private address"),
        ("169.254.169.254", "metadata address"),
        ("169.254.1.1", "link-local address"),
        ("0.0.0.0", "unspecified address"),
        ("::ffff:10.0.0.5", "private address"),
    ],
)
def test_special_addresses_are_refused_under_allow_all(addr: str, kind: str) -> None:
    assert special_kind(ip(addr)) == kind
    d = decide(["*"], [], "rebound.example", 6379, [ip(addr)])
    assert not d.allowed and d.reason == kind
    literal = decide(["*"], [], addr, 6379, [ip(addr)])
    assert not literal.allowed and literal.reason == kind


def test_a_name_resolving_to_one_special_address_among_public_ones_is_refused() -> None:
    d = decide(["pypi.org"], [], "pypi.org", 443, [*PUBLIC, ip("10.1.2.3")])
    assert not d.allowed and d.reason == "private address"


def test_special_ranges_open_only_when_named_as_addresses() -> None:
    allow = ["pypi.test", "127.0.0.5"]
    assert decide(allow, [], "pypi.test", 80, [ip("127.0.0.5")]).allowed
    assert not decide(allow, [], "pypi.test", 80, [ip("127.0.0.1")]).allowed
    assert not decide(["pypi.test", "0.0.0.0/0"], [], "pypi.test", 80, [ip("127.0.0.5")]).allowed
    assert decide(["10.1.0.0/16:5432"], [], "10.1.2.3", 5432, [ip("10.1.2.3")]).allowed
    assert not decide(["10.1.0.0/16:5432"], [], "10.1.2.3", 6379, [ip("10.1.2.3")]).allowed


def test_ceilings_cover_entries() -> None:
    assert covers(["*"], "pypi.org") and covers(["*"], "203.0.113.0/24")
    assert not covers(["*"], "10.0.0.0/8") and not covers(["*"], "127.0.0.5")
    assert covers(["*.corp.example"], "api.corp.example")
    assert covers(["*.corp.example"], "*.eu.corp.example")
    assert not covers(["*.corp.example"], "corp.example")
    assert covers(["10.0.0.0/8"], "10.1.0.0/16") and not covers(["10.1.0.0/16"], "10.0.0.0/8")
    assert covers(["github.com:443"], "github.com:443") and not covers(
        ["github.com:443"], "github.com"
    )
    assert not covers([], "pypi.org")


@pytest.mark.parametrize(
    ("allow", "deny", "host", "reason"),
    [
        (None, [], "localhost", "no network policy (offline session)"),
        (None, [], "203.0.113.7", "no network policy (offline session)"),
        ([], [], "pypi.org", "not in the allow list"),
        (
            ["pypi.org", "*.pythonhosted.org", "10.0.0.0/8", "[2001:db8::1]"],
            [],
            "x.test",
            "not in the allow list",
        ),
        (["pythonhosted.org:443"], [], "pythonhosted.org", "not in the allow list"),  # port 80
        (["*.pythonhosted.org"], [], "pythonhosted.org", "not in the allow list"),
        (["*"], ["*.invalid"], "leak-check.invalid", "denied by rule '*.invalid'"),
    ],
)
def test_precheck_refuses_what_no_lookup_could_change(
    allow: list[str] | None, deny: list[str], host: str, reason: str
) -> None:
    d = precheck(allow, deny, host, 80)
    assert d is not None and not d.allowed and d.reason == reason


@pytest.mark.parametrize(
    ("allow", "host"),
    [
        (["*"], "localhost"),  # ``*`` allows any name: it is resolved, then the address decides
        (["*:80"], "leak-check.invalid"),
        (["pypi.org"], "PyPI.org."),
        (["*.pythonhosted.org"], "files.pythonhosted.org"),
        (["pypi.org"], "10.0.0.5"),  # a literal: nothing to resolve, decide has it all
    ],
)
def test_precheck_leaves_to_decide_what_may_be_allowed(allow: list[str], host: str) -> None:
    assert precheck(allow, [], host, 80) is None


# 23.2: IPv6 forms that carry an IPv4 address are decided as that IPv4 address.
FORMS = {
    "mapped": "::ffff:{}",
    "compatible": "::{}",
    "nat64": "64:ff9b::{}",
}


def forms(v4: str) -> list[str]:
    """``v4`` written in every IPv6 form that carries it (6to4 puts it in bits 16-48)."""
    six = ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1)
    return [f.format(v4) for f in FORMS.values()] + [str(six)]


@pytest.mark.parametrize("form", forms("203.0.113.7"), ids=[*FORMS, "6to4"])
def test_every_form_unembeds_to_its_ipv4(form: str) -> None:
    assert unembed(ip(form)) == ip("203.0.113.7")


@pytest.mark.parametrize("addr", ["::", "::1", "2001:db8::1", "fd00::2", "203.0.113.7"])
def test_plain_addresses_stay_as_they_are(addr: str) -> None:
    assert unembed(ip(addr)) == ip(addr)


@pytest.mark.parametrize("form", forms("203.0.113.7"), ids=[*FORMS, "6to4"])
def test_deny_of_an_ipv4_range_holds_for_its_ipv6_forms(form: str) -> None:
    d = decide(["*"], ["203.0.113.0/24"], form, 443, [ip(form)])
    assert not d.allowed and d.rule == "203.0.113.0/24"
    named = decide(["*"], ["203.0.113.0/24"], "rebound.example", 443, [ip(form)])
    assert not named.allowed and named.rule == "203.0.113.0/24"  # a name resolving to it


@pytest.mark.parametrize("form", forms("127.0.0.77"), ids=[*FORMS, "6to4"])
def test_a_denied_port_on_a_named_loopback_address_holds_for_its_ipv6_forms(form: str) -> None:
    allow, deny = ["*", "127.0.0.77"], ["127.0.0.77:7000"]
    d = decide(allow, deny, form, 7000, [ip(form)])
    assert not d.allowed and d.rule == "127.0.0.77:7000"
    assert decide(allow, deny, form, 7001, [ip(form)]).allowed  # named: the other port opens
    assert decide(["127.0.0.77"], [], form, 7001, [ip(form)]).allowed  # allow by address too


@pytest.mark.parametrize(
    ("v4", "kind"),
    [
        ("127.0.0.1", "loopback address"),
        ("10.0.0.5", "private address"),
        ("169.254.169.254", "metadata address"),
    ],
)
def test_special_addresses_in_ipv6_forms_are_refused_under_allow_all(v4: str, kind: str) -> None:
    for form in forms(v4):
        assert special_kind(ip(form)) == kind
        d = decide(["*"], [], form, 6379, [ip(form)])
        assert not d.allowed and d.reason == kind, form


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ("[::ffff:127.0.0.1]:6379", "IPv4-mapped"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::ffff:10.0.0.0/104", "IPv4-mapped"),
        ("::7f00:1", "IPv4-compatible"),
        ("::/96", "IPv4-compatible"),
        ("64:ff9b::/96", "NAT64"),
        ("[64:ff9b::a00:5]:80", "NAT64"),
        ("2002::/16", "6to4"),
        ("2002:7f00::/24", "6to4"),
    ],
)
def test_entries_in_an_ipv6_form_of_ipv4_are_refused(entry: str, kind: str) -> None:
    with pytest.raises(ValueError, match=rf"in the {kind} form .*write the IPv4"):
        parse_rule(entry)
    with pytest.raises(ValidationError, match=r"network\.deny\[1\]: entry"):
        NetworkPolicy(deny=["ok.org", entry])


@pytest.mark.parametrize("entry", ["[::1]:6379", "::/128", "::/0", "2000::/3", "2001:db8::/32"])
def test_plain_ipv6_entries_still_parse(entry: str) -> None:
    assert parse_rule(entry).net is not None


# 23.3: the host's own addresses and the grid's service ports.
OWN = ip("192.0.2.2")
GUARD = Guard(
    host_addrs=frozenset({ip("127.0.0.1"), OWN, ip("fd00::2")}),
    service_ports=frozenset({6379, 9000, 8700}),
    endpoints=frozenset({(ip("203.0.113.50"), 6379)}),
)


def test_the_hosts_own_address_is_refused_under_allow_all_and_ranges() -> None:
    for allow in (["*"], ["192.0.2.0/24"], ["0.0.0.0/0"], ["*", "192.0.2.0/24:8080"]):
        d = decide(allow, [], "192.0.2.2", 8080, [OWN], GUARD)
        assert not d.allowed and d.reason == HOST_ADDRESS, allow
    rebound = decide(["*"], [], "rebound.example", 8080, [OWN], GUARD)
    assert not rebound.allowed and rebound.reason == HOST_ADDRESS
    mapped = decide(["*"], [], "::ffff:192.0.2.2", 8080, [ip("::ffff:192.0.2.2")], GUARD)
    assert mapped.reason == HOST_ADDRESS
    assert decide(["*"], [], "192.0.2.3", 8080, [ip("192.0.2.3")], GUARD).allowed  # a neighbour


def test_the_hosts_own_address_opens_only_when_named_exactly() -> None:
    assert decide(["*", "192.0.2.2"], [], "192.0.2.2", 8080, [OWN], GUARD).allowed
    assert decide(["192.0.2.2:8080"], [], "192.0.2.2", 8080, [OWN], GUARD).allowed
    assert not decide(["192.0.2.2:8081"], [], "192.0.2.2", 8080, [OWN], GUARD).allowed
    # a private host address needs both: the private range named, and the address itself
    assert decide(["fd00::/8"], [], "fd00::2", 80, [ip("fd00::2")], GUARD).reason == HOST_ADDRESS
    assert decide(["[fd00::2]"], [], "fd00::2", 80, [ip("fd00::2")], GUARD).allowed


def test_a_grid_port_on_loopback_needs_the_port_named() -> None:
    lo = [ip("127.0.0.1")]
    for allow in (["127.0.0.0/8"], ["127.0.0.1"], ["*", "127.0.0.0/8"]):
        d = decide(allow, [], "127.0.0.1", 6379, lo, GUARD)
        assert not d.allowed and d.reason == SERVICE_PORT, allow
    assert decide(["127.0.0.1:6379"], [], "127.0.0.1", 6379, lo, GUARD).allowed
    assert decide(["127.0.0.0/8:6379"], [], "127.0.0.1", 6379, lo, GUARD).allowed
    d = decide(["127.0.0.0/8"], [], "127.0.0.5", 8700, [ip("127.0.0.5")], GUARD)
    assert d.reason == SERVICE_PORT  # any loopback address
    assert decide(["127.0.0.0/8"], [], "127.0.0.5", 80, [ip("127.0.0.5")], GUARD).allowed
    named = decide(["pypi.test", "127.0.0.0/8"], [], "pypi.test", 9000, [ip("127.0.0.5")], GUARD)
    assert named.reason == SERVICE_PORT  # names never open a grid port


def test_a_grid_port_on_the_hosts_address_and_on_the_services_endpoint() -> None:
    d = decide(["192.0.2.2"], [], "192.0.2.2", 6379, [OWN], GUARD)
    assert not d.allowed and d.reason == SERVICE_PORT
    assert decide(["192.0.2.2:6379"], [], "192.0.2.2", 6379, [OWN], GUARD).allowed
    public = [ip("203.0.113.9")]
    assert decide(["*"], [], "203.0.113.9", 6379, public, GUARD).allowed  # someone else's
    endpoint = decide(["*"], [], "redis.example", 6379, [ip("203.0.113.50")], GUARD)
    assert not endpoint.allowed and endpoint.reason == SERVICE_PORT
    assert decide(
        ["203.0.113.50:6379"], [], "203.0.113.50", 6379, [ip("203.0.113.50")], GUARD
    ).allowed
