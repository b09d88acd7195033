"""The control plane's egress policy: defaults, the tenant ceiling, the audit view."""

from __future__ import annotations

import json

import pytest
import redis

from sandgrid.errors import InvalidInput
from sandgrid.models import NetworkAttempt, NetworkPolicy, SessionCreate
from sandgrid.wire import names
from scheduler.network import check_policy, effective_policy, network_view
from scheduler.tenants import Tenant, TenantLimits
from tests.support.fakes import Grid


def tenant(**limits: object) -> Tenant:
    return Tenant(name="acme", limits=TenantLimits.model_validate(limits))


def test_the_session_policy_wins_then_the_tenant_default_then_none() -> None:
    own = NetworkPolicy(allow=["pypi.org"])
    default = NetworkPolicy(allow=["github.com"])
    assert effective_policy(tenant(network_default=default), SessionCreate(network=own)) == own
    assert effective_policy(tenant(network_default=default), SessionCreate()) == default
    assert effective_policy(tenant(), SessionCreate()) is None


def test_an_entry_beyond_the_ceiling_is_named() -> None:
    check_policy(tenant(), NetworkPolicy(allow=["pypi.org", "203.0.113.0/24"]))
    with pytest.raises(InvalidInput) as err:
        check_policy(tenant(), NetworkPolicy(allow=["pypi.org", "10.0.0.0/8"]))
    assert err.value.context["field"] == "network.allow[1]"
    assert "'10.0.0.0/8' is beyond tenant 'acme'" in str(err.value)
    with pytest.raises(InvalidInput, match=r"network\.allow\[0\]"):
        check_policy(tenant(network_ceiling=["*.corp.example"]), NetworkPolicy(allow=["pypi.org"]))
    check_policy(tenant(network_ceiling=["*", "10.0.0.0/8"]), NetworkPolicy(allow=["10.1.0.0/16"]))
    with pytest.raises(InvalidInput):
        effective_policy(
            tenant(network_ceiling=[]), SessionCreate(network=NetworkPolicy(allow=["a.b"]))
        )


def test_a_ceiling_entry_in_an_ipv6_form_of_ipv4_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"network_ceiling\[1\]: entry '::ffff:0:0/96' is in the"):
        tenant(network_ceiling=["*", "::ffff:0:0/96"])
    assert tenant(network_ceiling=["*", "[::1]:6379"]).limits.network_ceiling == ["*", "[::1]:6379"]


@pytest.mark.parametrize(
    "entry", ["[::ffff:127.0.0.1]:6379", "::ffff:0:0/96", "64:ff9b::/96", "2002::/16"]
)
def test_the_api_refuses_a_policy_entry_in_an_ipv6_form_with_422(grid: Grid, entry: str) -> None:
    body = {"type": "python", "network": {"allow": ["pypi.org"], "deny": [entry]}}
    r = grid.http.post("/v1/sessions", json=body, headers=grid.headers())
    assert r.status_code == 422, r.text
    assert "network.deny[0]" in r.text and entry in r.text and "write the IPv4" in r.text


def test_the_view_reads_the_stream_and_usage(redis_client: redis.Redis[str]) -> None:
    sid = "s-viewtest000000000001"
    key = names.egress_audit_key(sid)
    for port in (1, 2, 3):
        a = NetworkAttempt(ts=1.0, host="h", port=port, allowed=port != 2)
        redis_client.xadd(key, {"a": a.model_dump_json()})
    redis_client.hset(names.egress_usage_key(sid), mapping={"connections": 2, "bytes": 7})
    view = network_view(redis_client, sid, None, limit=2)
    assert [a.port for a in view.attempts] == [2, 3] and (view.connections, view.bytes) == (2, 7)
    assert json.loads(view.model_dump_json())["policy"] is None
