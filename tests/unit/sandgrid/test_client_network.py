"""23.17: the SDK asks for a network policy: ``session(network=...)``, ``set_network``,
``network()`` (sync and async), against the pure builders and the in-process API."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from sandgrid.client import AsyncClient
from sandgrid.client import _network as net
from sandgrid.client import _requests as api
from sandgrid.errors import InvalidInput
from sandgrid.models import NetworkPolicy
from tests.support.fakes import Grid


def test_create_session_sends_the_policy() -> None:
    call = api.create_session("python", network={"allow": ["PyPI.org:443"], "max_bytes": 10})
    assert call.json["network"] == {"allow": ["pypi.org:443"], "max_bytes": 10}
    model = api.create_session(network=NetworkPolicy(allow=["*"], deny=["10.0.0.0/8"]))
    assert model.json["network"] == {"allow": ["*"], "deny": ["10.0.0.0/8"]}
    assert "network" not in api.create_session().json  # none: the defaults apply
    offline = api.create_session(network={"allow": []})
    assert offline.json["network"] == {}  # a policy that allows nothing, not "no policy"


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        ({"allow": ["pypi.org", "bad host"]}, "network.allow[1]"),
        ({"allow": ["pypi.org:0"]}, "network.allow[0]"),
        ({"deny": ["10.0.0.0/33"]}, "network.deny[0]"),
        ({"alow": ["pypi.org"]}, "network.alow"),
        ({"max_connections": -1}, "network.max_connections"),
        (["pypi.org"], "network: a network policy is a mapping"),
    ],
)
def test_a_bad_policy_is_refused_before_any_round_trip(policy: object, named: str) -> None:
    for build in (
        lambda: api.create_session(network=policy),  # type: ignore[arg-type]
        lambda: net.set_network("s-1", policy),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidInput) as caught:
            build()
        assert caught.value.message.startswith(named), caught.value.message


def test_network_calls() -> None:
    view = net.network("s-1", limit=5)
    assert (view.method, view.path, view.params) == (
        "GET",
        "/v1/sessions/s-1/network",
        {"limit": 5},
    )
    assert net.network("s-1").params is None
    patch = net.set_network("s-1", {"allow": ["pypi.org"]})
    assert (patch.method, patch.path, patch.json) == (
        "PATCH",
        "/v1/sessions/s-1/network",
        {"allow": ["pypi.org"]},
    )
    assert patch.idempotent  # replacing a policy twice is replacing it once


def test_sync_session_with_a_policy_end_to_end(grid: Grid) -> None:
    token = grid.add_tenant("netco", network_ceiling=["*", "10.0.0.0/8"])
    with grid.client(token) as c, c.session(network={"allow": ["pypi.org:443"]}) as s:
        assert s.info.network == NetworkPolicy(allow=["pypi.org:443"])
        view = s.network()
        assert view.policy == NetworkPolicy(allow=["pypi.org:443"])
        assert (view.connections, view.bytes, view.attempts) == (0, 0, [])
        info = s.set_network({"allow": ["10.1.0.0/16"]})
        assert info.network == NetworkPolicy(allow=["10.1.0.0/16"])
        assert c.network(s.id).policy == NetworkPolicy(allow=["10.1.0.0/16"])
        with pytest.raises(InvalidInput, match=r"network\.allow\[0\]"):
            s.set_network({"allow": ["192.168.0.0/16"]})  # beyond the ceiling: the API's 422
        with pytest.raises(InvalidInput, match="ceiling"):
            c.session(network={"allow": ["172.16.0.1"]})


def test_async_session_with_a_policy_end_to_end(grid: Grid) -> None:
    async def scenario() -> None:
        transport = httpx.ASGITransport(app=grid.app)
        async with (
            AsyncClient("http://testserver", grid.token_a, transport=transport) as c,
            c.session(network={"allow": ["pypi.org"]}) as s,
        ):
            assert (await s.network()).policy == NetworkPolicy(allow=["pypi.org"])
            info = await s.set_network(NetworkPolicy(allow=[]))
            assert info.network == NetworkPolicy(allow=[])
            assert (await c.network(s.id, limit=1)).policy == NetworkPolicy(allow=[])

    asyncio.run(scenario())
