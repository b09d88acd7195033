"""The egress policy: entry parsing, decisions, tenant ceilings, the wire model."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from sandgrid.models import NetworkPolicy, SessionCreate
from sandgrid.network import covers, decide, parse_rule, special_kind


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
